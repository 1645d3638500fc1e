"""`servers.attach`: SGLang servers the daemon did not launch (a Slurm job or a pod of their
own), each given as `http://host:port`. Checked at load, one clear line per bad entry: a
typo here would otherwise show up as a server that is never reachable."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from supervisor.config.host_names import host_problem
from supervisor.config.sections import ConfigError


@dataclass(frozen=True)
class AttachTarget:
    name: str          # "ext0": the name in status, events and the TUI
    url: str           # "http://node7:30000", as normalised (no trailing slash)
    host: str
    port: int


def parse_attach_url(index: int, url: object) -> AttachTarget:
    """The entry `servers.attach[index]`, or ConfigError naming it and what is wrong."""
    where = f"servers.attach[{index}]"
    example = "e.g. \"http://node7:30000\""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"{where}: {url!r} is not a URL ({example})")
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{where}: {url!r} needs http:// or https:// in front ({example})")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ConfigError(f"{where}: {url!r}: only scheme, host and port (SGLang serves at the "
                          f"root; {example})")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{where}: {url!r}: the port is not a TCP port (1..65535)") from None
    if port is None:
        raise ConfigError(f"{where}: {url!r} has no port ({example})")
    if not 1 <= port <= 65535:
        raise ConfigError(f"{where}: {url!r}: the port is not a TCP port (1..65535)")
    host = parts.hostname or ""
    problem = host_problem(host) if host else "no host"
    if problem:
        raise ConfigError(f"{where}: {url!r}: {problem}")
    shown = f"[{host}]" if ":" in host else host
    return AttachTarget(f"ext{index}", f"{parts.scheme}://{shown}:{port}", host, port)


def attach_targets(urls: tuple[str, ...]) -> list[AttachTarget]:
    """Every entry of servers.attach, checked; the same server twice is refused (it would
    get twice the requests it has slots for)."""
    targets: list[AttachTarget] = []
    seen: dict[tuple[str, int], int] = {}
    for i, url in enumerate(urls):
        t = parse_attach_url(i, url)
        key = (t.host.lower(), t.port)
        if key in seen:
            raise ConfigError(f"servers.attach[{i}]: {url!r} is the same server as "
                              f"servers.attach[{seen[key]}]")
        seen[key] = i
        targets.append(t)
    return targets
