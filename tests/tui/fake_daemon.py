"""A stand-in for the control client with fixed contract data, for snapshot and key tests
(the app is built around any object with the client's operations). It answers actions the
way the daemon's contract says, and records every call so a test can check what was sent."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator

import anyio

from supervisor.contract.status import FlagValue, PauseReason, ServerState, Status, StreamItem
from supervisor.contract.actions import (FlagChange, LogTail, MaxTokensResult, PauseResult,
                                         RequeueResult, ResetResult, RestartResult, ResumeResult,
                                         RetuneResult)
from supervisor.client.control_client import ControlRefused, ControlUnreachable


@dataclass
class FakeDaemon:
    status_now: Status | None
    socket: str = "/run/dflash-supervisor/control.sock"
    down: str | None = None               # set: every call fails as unreachable, with this
    calls: list[tuple[str, Any]] = field(default_factory=list)
    refuse: dict[str, str] = field(default_factory=dict)   # operation -> refusal reason
    log_lines: tuple[str, ...] = ()
    # Set: the stream sends one snapshot, then the daemon "dies" with this reason.
    dies_after_first: str | None = None

    def _call(self, name: str, args: Any = None) -> None:
        if self.down is not None:
            raise ControlUnreachable(self.socket, self.down)
        self.calls.append((name, args))
        if name in self.refuse:
            raise ControlRefused(409, self.refuse[name])

    @property
    def _s(self) -> Status:
        assert self.status_now is not None
        return self.status_now

    async def status(self) -> Status:
        self._call("status")
        return self._s

    async def events(self, since: int | None = None, *,
                     idle_timeout_s: float = 60.0) -> AsyncIterator[StreamItem]:
        if self.down is not None:
            raise ControlUnreachable(self.socket, self.down)
        if self.status_now is not None:
            yield self.status_now
        if self.dies_after_first is not None:
            self.down = self.dies_after_first
            raise ControlUnreachable(self.socket, "the daemon closed the connection")
        await anyio.sleep_forever()

    async def log(self, server: str, lines: int = 200) -> LogTail:
        self._call("log", server)
        return LogTail(server=server, path=f"/var/log/dflash-supervisor/{server}.log",
                       lines=self.log_lines[-lines:])

    async def set_max_tokens(self, value: int, *,
                             requeue_truncated: bool = False) -> MaxTokensResult:
        self._call("set_max_tokens", (value, requeue_truncated))
        old = self._s.max_tokens
        self.status_now = replace(self._s, max_tokens=value)
        return MaxTokensResult(old=old, new=value,
                               requeued=self._s.job.truncated if requeue_truncated else None)

    async def requeue_truncated(self, *, include_loops: bool = False) -> RequeueResult:
        self._call("requeue_truncated", include_loops)
        return RequeueResult(what="truncated", count=self._s.job.requeueable_truncated or 0,
                             below_max_tokens=self._s.max_tokens)

    async def pause(self, reason: str) -> PauseResult:
        self._call("pause", reason)
        paused = self._s.paused + (PauseReason("operator", reason),)
        self.status_now = replace(self._s, paused=paused)
        return PauseResult(changed=True, reason=reason, paused=paused)

    async def resume(self) -> ResumeResult:
        self._call("resume")
        # As the daemon does: the operator's and the quality gate's pauses lift, a disk
        # pause stays until there is room again.
        lifted = tuple(p for p in self._s.paused if p.source in ("operator", "quality"))
        rest = tuple(p for p in self._s.paused if p not in lifted)
        self.status_now = replace(self._s, paused=rest)
        return ResumeResult(lifted=lifted, paused=rest)

    async def restart(self, server: str | None = None) -> RestartResult:
        self._call("restart", server)
        order = (server,) if server else tuple(s.name for s in self._s.servers)
        return RestartResult(order=order, reason="restart requested")

    async def retune(self, flags: dict[str, FlagValue | None], *, server: str | None = None,
                     add: bool = False) -> RetuneResult:
        self._call("retune", (flags, server, add))
        current = {f.name: f.value for f in self._s.servers[0].flags}
        order = (server,) if server else tuple(s.name for s in self._s.servers)
        return RetuneResult(changes=tuple(FlagChange(n, current.get(n), v)
                                          for n, v in flags.items()), order=order)

    async def reset(self, server: str) -> ResetResult:
        self._call("reset", server)
        return ResetResult(server=server, was=ServerState.FAILED)

    async def aclose(self) -> None:
        pass
