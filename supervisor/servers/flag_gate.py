"""The launch flags refused before any launch or retune: flags the installed SGLang's own
parser refuses (supervisor/sglang/flag_check.py) stop the daemon's start, or a retune or a
reload before it stops a server, with one line naming them -- not eight crash loops.
"""

from __future__ import annotations

import functools
import logging
import subprocess
from collections.abc import Iterable, Mapping

import anyio

from supervisor.config import ConfigError, ServersSection
from supervisor.servers.launch_command import build_argv
from supervisor.sglang.flag_check import FlagVerdict, Runner, parser_verdict

log = logging.getLogger("supervisor.servers")


def sglang_verdict(servers: ServersSection, env: Mapping[str, str] | None = None,
                   timeout_s: float = 300.0, runner: Runner = subprocess.run) -> FlagVerdict:
    """SGLang's parser on these servers' launch line. Blocking (SGLang imports torch: seconds
    to a minute); call it off the event loop."""
    argv = build_argv(servers, servers.base_port)
    return parser_verdict(servers.command, argv[len(servers.command):], len(servers.flags),
                          env, timeout_s, runner)


def refusal_message(verdict: FlagVerdict) -> str:
    return (f"servers.flags: the installed SGLang refuses the launch flags: {verdict.detail} "
            "(fix or remove them; `dflash-supervisor check` lists close names)")


# At daemon start, well inside systemd's default TimeoutStartSec (90 s): READY is only sent
# after this. Importing SGLang (torch) takes seconds; past this the check is skipped, not failed.
START_CHECK_TIMEOUT_S = 60.0


def require_accepted_flags(servers: ServersSection, env: Mapping[str, str] | None = None,
                           runner: Runner = subprocess.run,
                           timeout_s: float = START_CHECK_TIMEOUT_S) -> FlagVerdict:
    """At daemon start: raise ConfigError when SGLang's parser refuses the flags; log a line
    and go on when they cannot be checked here."""
    verdict = sglang_verdict(servers, env, timeout_s, runner)
    if verdict.refused:
        raise ConfigError(refusal_message(verdict))
    if verdict.accepted:
        log.info("launch flags checked: %s", verdict.detail)
    else:
        log.info("launch flags not checked before launch: %s", verdict.detail)
    return verdict


async def require_accepted_retune(sections: Iterable[ServersSection],
                                  env: Mapping[str, str] | None = None,
                                  runner: Runner = subprocess.run,
                                  timeout_s: float = START_CHECK_TIMEOUT_S) -> None:
    """Before a retune or a reload rolls: raise ConfigError when SGLang's parser refuses a
    server's new flags, so no server is stopped for flags it cannot start with (the roll
    would stop at the first one, a server down for nothing). One check per distinct set of
    flags, in a worker thread (SGLang's import takes seconds)."""
    seen: set[tuple[str, ...]] = set()
    for servers in sections:
        argv = tuple(build_argv(servers, servers.base_port))
        if argv in seen:
            continue
        seen.add(argv)
        await anyio.to_thread.run_sync(functools.partial(
            require_accepted_flags, servers, env, runner, timeout_s))
