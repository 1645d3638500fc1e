"""Keeps the TUI fed from the daemon: the event stream when there is one, else a status
poll, and reconnection with backoff when the daemon goes away (a restart, an upgrade).

The poll schedules its next request only once the last has answered, so a slow daemon slows
the screen down rather than piling requests up on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from supervisor.client.control_client import ControlError, ControlRefused, ControlUnreachable
from supervisor.contract.status import Event, Gap, Status
from tui.client_protocol import DaemonClient
from tui.link_state import LinkState


@dataclass(frozen=True)
class FeedTiming:
    retry_initial_s: float = 0.5
    retry_max_s: float = 5.0
    # The daemon sends a snapshot every control.interval_s; this much silence is a dead link.
    idle_timeout_s: float = 15.0
    poll_interval_s: float = 1.0


async def follow(daemon: DaemonClient, *, on_status: Callable[[Status], None],
                 on_event: Callable[[Event], None], on_link: Callable[[LinkState], None],
                 timing: FeedTiming = FeedTiming(),
                 clock: Callable[[], float] = time.monotonic) -> None:
    """Runs until cancelled."""
    attempts = 0
    down_since: float | None = None
    since: int | None = None      # the last event id seen: a reconnect replays what followed
    streaming = True
    ever = False                  # "waiting for the daemon" until it first answers
    while True:
        try:
            if streaming:
                first = True
                async for item in daemon.events(since, idle_timeout_s=timing.idle_timeout_s):
                    if first:
                        first, attempts, down_since, ever = False, 0, None, True
                        on_link(LinkState(connected=True, streaming=True, ever_connected=True))
                    if isinstance(item, Status):
                        on_status(item)
                    elif isinstance(item, Event):
                        since = item.id
                        on_event(item)
                    elif isinstance(item, Gap):
                        # Fell behind: the next snapshot's recent events fill the gap.
                        pass
                raise ControlUnreachable(daemon.socket, "the daemon ended the event stream")
            status = await daemon.status()
            attempts, down_since, ever = 0, None, True
            on_link(LinkState(connected=True, streaming=False, ever_connected=True))
            on_status(status)
            await anyio.sleep(timing.poll_interval_s)
            continue
        except ControlRefused as exc:
            if streaming and exc.status == 404:
                streaming = False      # a daemon without the stream: poll it instead
                continue
            reason = str(exc)
        except ControlError as exc:
            reason = str(exc)
        attempts += 1
        down_since = clock() if down_since is None else down_since
        on_link(LinkState(connected=False, reason=reason, attempts=attempts,
                          since=down_since, streaming=streaming, ever_connected=ever))
        await anyio.sleep(min(timing.retry_max_s,
                              timing.retry_initial_s * 2 ** min(attempts - 1, 10)))
