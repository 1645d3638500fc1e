"""One READY life of one server, as the dispatcher serves it, and the end-of-job hand-over
of prompts between servers' buffers.

Each server's feeder keeps a buffer of claimed prompts (up to `dispatch.claim_batch`) so a
slot that frees is refilled without a store round trip. At the end of a job that buffer is
a tail: the store has nothing left, one server's buffer still holds prompts waiting for its
busy slots, and another server's slots stand idle. In benchmarks/bench_dispatch.py (part 2:
every request the same length) two such prompts ran as one more round of requests while the
other server waited: 1.3 s of a 27 s job. So a feeder that finds the store empty while its
own workers wait takes prompts from another server's buffer (never one already sent).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio

from state.records import ClaimedPrompt
from supervisor.dispatch.stream_deadlines import StreamDeadlines
from supervisor.servers.endpoint import Endpoint
from supervisor.servers.inflight_limit import InFlightLimit

log = logging.getLogger("supervisor.dispatch")


@dataclass(eq=False)
class Serving:
    endpoint: Endpoint
    claimed: dict[str, ClaimedPrompt] = field(default_factory=dict)  # not yet resolved
    # Requests cut off with the server's life (cancelled): completion tokens they had
    # streamed, and whether that count is the server's (not a guess), for the waste ledger.
    cut: dict[str, tuple[int, bool]] = field(default_factory=dict)
    wake: anyio.Event = field(default_factory=anyio.Event)
    limit: InFlightLimit | None = None     # the saturation guard may lower it live
    deadlines: StreamDeadlines | None = None   # its streams' stall and timeout clocks
    buffer: Any = None                     # the feeder's end of its buffer (a receive stream)


def take_over(thief: Serving, others: Iterable[Serving], send: Any, want: int) -> int:
    """Move up to `want` prompts buffered (claimed, not sent) by `others` into `thief`'s
    buffer through `send`; how many moved. No await: a prompt is always in exactly one
    server's `claimed`, so whichever life ends first gives back only what it still holds.
    The prompt's row keeps the first server's name until its outcome names the one that ran
    it."""
    moved = 0
    for other in others:
        if other is thief or other.buffer is None:
            continue
        while moved < want:
            try:
                prompt = other.buffer.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
            del other.claimed[prompt.id]
            thief.claimed[prompt.id] = prompt
            send.send_nowait(prompt)
            moved += 1
        if moved:
            log.info("%s: took %d buffered prompt(s) from %s (nothing left to claim, its slots "
                     "busy)", thief.endpoint.name, moved, other.endpoint.name)
            other.wake.set()       # its buffer has room: its feeder may look again
        if moved >= want:
            break
    return moved
