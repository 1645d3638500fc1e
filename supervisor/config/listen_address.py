"""`control.metrics_listen`: the TCP address the read-only metrics listener binds.

Written the way Prometheus' own exporters take it (`--web.listen-address`): `host:port`,
an IPv6 host in brackets (`[::1]:9464`), `0.0.0.0:9464` or `[::]:9464` for every
interface. A bare `:9464` is refused rather than read as "every interface": exposing the
job's figures to the whole network should be written out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, replace

from supervisor.config.sections import ConfigError, ControlSection

KEY = "control.metrics_listen"
# Where an unset control.metrics_listen is read from: the Slurm batch file sets it, so one
# config shared by every node of the array needs no [control] line for it.
ENV = "DFLASH_METRICS_LISTEN"


@dataclass(frozen=True)
class ListenAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: str, key: str = KEY) -> ListenAddress:
    """`host:port` -> ListenAddress; a one-line ConfigError naming the key otherwise."""
    example = "e.g. 127.0.0.1:9464, 0.0.0.0:9464 or [::1]:9464"
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{key}: expected host:port ({example}), got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{key}: {host!r} in brackets is not an IPv6 address") from None
    elif ":" in host:
        raise ConfigError(f"{key}: an IPv6 host goes in brackets ({example}), got {text!r}")
    else:
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ConfigError(f"{key}: the host must be an IP address the node has ({example}), "
                              f"got {host!r}") from None
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ConfigError(f"{key}: the port must be 1..65535, got {port_text!r}")
    return ListenAddress(host, int(port_text))


def listen_from_env(control: ControlSection, env: Mapping[str, str]) -> ControlSection:
    """control.metrics_listen from $DFLASH_METRICS_LISTEN where the file leaves it unset."""
    if control.metrics_listen or not env.get(ENV):
        return control
    return replace(control, metrics_listen=env[ENV])
