"""uvicorn's server as the job runs it: on the job's event loop, in its task group, without
uvicorn's signal handling, because the job owns SIGTERM/SIGINT (a stop must drain servers,
not just close sockets)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import anyio
import uvicorn


class JobServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def stop(self, sockets: list[socket.socket], within_s: float) -> None:
        """Stop serving (call shielded, from a finally)."""
        if self.started:
            self.should_exit = True
            with anyio.move_on_after(within_s):
                await self.shutdown(sockets=sockets)
