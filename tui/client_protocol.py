"""What dflash-tui needs of the control client: its async operations, as a Protocol.

The app is built by `make_app(daemon)`: in use `daemon` is the real `AsyncControlClient`
over the Unix socket; tests hand it a fake with fixed contract data. Nothing here or in the
app knows how the daemon stores, measures or uploads anything: only the status contract.
"""

from __future__ import annotations

from typing import AsyncIterator, Protocol

from supervisor.client.control_client import AsyncControlClient
from supervisor.contract.status import FlagValue, Status, StreamItem
from supervisor.contract.actions import (LogTail, MaxTokensResult, PauseResult, RequeueResult,
                                         ResetResult, RestartResult, ResumeResult, RetuneResult)

class DaemonClient(Protocol):
    """The daemon's control socket as the TUI uses it. Every call may raise ControlError:
    ControlUnreachable (no daemon), ControlRefused (the daemon said no, with its reason)
    or ControlProtocolError (an answer that does not fit the contract)."""

    socket: str

    async def status(self) -> Status: ...

    def events(self, since: int | None = None, *,
               idle_timeout_s: float = 60.0) -> AsyncIterator[StreamItem]: ...

    async def log(self, server: str, lines: int = 200) -> LogTail: ...

    async def set_max_tokens(self, value: int, *, requeue_truncated: bool = False,
                             continue_truncated: bool = False) -> MaxTokensResult: ...

    async def requeue_truncated(self, *, include_loops: bool = False) -> RequeueResult: ...

    async def pause(self, reason: str) -> PauseResult: ...

    async def resume(self) -> ResumeResult: ...

    async def restart(self, server: str | None = None) -> RestartResult: ...

    async def retune(self, flags: dict[str, FlagValue | None], *, server: str | None = None,
                     add: bool = False) -> RetuneResult: ...

    async def reset(self, server: str) -> ResetResult: ...

    async def aclose(self) -> None: ...


def connect(socket: str | None) -> DaemonClient:
    """The real client; it connects lazily, so a daemon that is not up yet is not an error."""
    return AsyncControlClient(socket)
