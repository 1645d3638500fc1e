"""The control socket's calls as a typed, async interface over the one generic `call`.

`ControlCalls` is what every user of the socket programs against: the real client
(`AsyncControlClient`, and `ControlClient` that runs the same calls blocking), dflash-tui
(`tui.client_protocol.DaemonClient` is this class) and the TUI tests' fake daemon. A
subclass supplies `call`, `events` and `aclose`; the shortcuts below only pair an entry
of contract/api.py with its request record, so paths and result records stay in the table.

Every call may raise ControlError: ControlUnreachable (no daemon), ControlRefused (the
daemon said no, with its one-line reason) or ControlProtocolError (an answer that does
not fit the contract).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import TypeVar

from supervisor.contract import api
from supervisor.contract.actions import (
    FlagSetting,
    LogRequest,
    LogTail,
    MaxTokensRequest,
    MaxTokensResult,
    PauseRequest,
    PauseResult,
    RequeueFailedRequest,
    RequeueResult,
    RequeueTruncatedRequest,
    ResetRequest,
    ResetResult,
    RestartRequest,
    RestartResult,
    ResumeRequest,
    ResumeResult,
    RetuneRequest,
    RetuneResult,
    StatusRequest,
)
from supervisor.contract.status import FlagValue, Status, StreamItem
from supervisor.contract.tuning import (
    FlagRange,
    TuneStartRequest,
    TuneStartResult,
    TuneStopRequest,
    TuneStopResult,
)

Req = TypeVar("Req")
Res = TypeVar("Res")


class ControlCalls(ABC):
    socket: str

    @abstractmethod
    async def call(self, endpoint: api.Endpoint[Req, Res], request: Req) -> Res:
        """Send one request of the table and return its result record."""

    @abstractmethod
    def events(self, since: int | None = None, *,
               idle_timeout_s: float = 60.0) -> AsyncIterator[StreamItem]:
        """Status snapshots and events as they come (a Gap where this reader fell behind)."""

    @abstractmethod
    async def aclose(self) -> None: ...

    # -- typed shortcuts: one line each ---------------------------------------------------------

    async def status(self) -> Status:
        return await self.call(api.STATUS, StatusRequest())

    async def log(self, server: str, lines: int = 200) -> LogTail:
        return await self.call(api.LOG, LogRequest(server, lines))

    async def set_max_tokens(self, value: int, *, requeue_truncated: bool = False,
                             continue_truncated: bool = False,
                             include_loops: bool = False,
                             requeue_at_most: int | None = None) -> MaxTokensResult:
        return await self.call(api.MAX_TOKENS, MaxTokensRequest(
            value, requeue_truncated, continue_truncated, include_loops, requeue_at_most))

    async def requeue_truncated(self, *, include_loops: bool = False) -> RequeueResult:
        return await self.call(api.REQUEUE_TRUNCATED, RequeueTruncatedRequest(include_loops))

    async def requeue_failed(self, reason_like: str | None = None) -> RequeueResult:
        return await self.call(api.REQUEUE_FAILED, RequeueFailedRequest(reason_like))

    async def pause(self, reason: str) -> PauseResult:
        return await self.call(api.PAUSE, PauseRequest(reason))

    async def resume(self) -> ResumeResult:
        return await self.call(api.RESUME, ResumeRequest())

    async def restart(self, server: str | None = None) -> RestartResult:
        return await self.call(api.RESTART, RestartRequest(server))

    async def retune(self, flags: dict[str, FlagValue | None], *, server: str | None = None,
                     add: bool = False) -> RetuneResult:
        settings = tuple(FlagSetting(k, v) for k, v in flags.items())
        return await self.call(api.RETUNE, RetuneRequest(settings, server, add))

    async def reset(self, server: str) -> ResetResult:
        return await self.call(api.RESET, ResetRequest(server))

    async def tune_start(self, space: tuple[FlagRange, ...] = (), *, server: str | None = None,
                         max_trials: int | None = None, force: bool = False) -> TuneStartResult:
        return await self.call(api.TUNE_START, TuneStartRequest(space, server, max_trials, force))

    async def tune_stop(self) -> TuneStopResult:
        return await self.call(api.TUNE_STOP, TuneStopRequest())


def shortcuts() -> frozenset[str]:
    """The typed shortcuts' names (what the blocking client runs for its callers)."""
    return frozenset(name for name, value in vars(ControlCalls).items()
                     if not name.startswith("_") and callable(value)
                     and name not in ("call", "events", "aclose"))


__all__ = ["ControlCalls", "shortcuts"]
