"""Whether a configured host is an IP address or a host name: the servers' bind address
(`servers.host`) and each attached server's URL (`servers.attach`) are held to the same rule."""

from __future__ import annotations

import ipaddress
import re

# RFC 1123 host names: dot-separated labels of letters, digits and hyphens, 1..63 long, not
# starting or ending with a hyphen; 253 characters in all.
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def host_problem(host: str) -> str | None:
    """Why `host` is neither an IP address nor a host name (one line), or None. The servers
    bind it and the daemon connects to it: a URL or "host:port" here fails every server."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    # An all-digit last label is a mistyped IPv4 address, not a name (RFC 3696 2).
    if (0 < len(name) <= 253 and all(_LABEL.match(label) for label in labels)
            and not labels[-1].isdigit()):
        return None
    hint = ""
    if "://" in host or "/" in host:
        hint = " (no scheme or path: just the address)"
    elif host.count(":") == 1:
        hint = " (no port here: server i listens on servers.base_port + i)"
    return (f"{host!r} is not an IP address or a host name{hint}; e.g. 127.0.0.1, ::1 or "
            "node7.cluster")
