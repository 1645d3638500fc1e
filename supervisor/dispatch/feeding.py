"""Feeding a READY server: one feeder and `max_running` + `queue_ahead` workers per server
life.

The workers are the server's slots and a few more (`dispatch.queue_ahead`): those wait in
SGLang's queue, so a slot that frees is filled by SGLang's scheduler at its next step, not
after a round trip of ours (inflight_limit.py says why, benchmarks/bench_queue_ahead.py how
much it is).

The feeder claims pending prompts from the store in batches into a small local buffer (so a
finished slot is refilled at once, without waiting for a store round trip); each worker takes
a prompt, holds one of the server's in-flight slots and runs the request path
(request_path.py). Paused or draining, the feeder stops claiming and gives the buffered
prompts back. When a life ends (the server left READY and `serve` is cancelled), everything
it claimed and did not finish goes back to pending without counting an attempt: the server's
death is not the prompt's fault.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import aiohttp
import anyio
import httpx

from state.async_store import AsyncStore
from state.records import ClaimedPrompt, Outcome, Requeue
from state.store import Store
from state.waste_table import Wasted
from supervisor.config.live_settings import LiveSettings
from supervisor.contract.waste_causes import WasteCause
from supervisor.dispatch.dispatch_figures import DispatchFigures
from supervisor.dispatch.pauses import Pauses
from supervisor.dispatch.recorder import Recorder
from supervisor.dispatch.request_path import RequestPath
from supervisor.dispatch.serving import Serving, take_over
from supervisor.dispatch.stall_watch import StallWindow
from supervisor.dispatch.stream_deadlines import StreamDeadlines
from supervisor.dispatch.stream_request import abort_stream
from supervisor.dispatch.worker_client import worker_client
from supervisor.servers.endpoint import Endpoint
from supervisor.servers.inflight_limit import InFlightLimit

log = logging.getLogger("supervisor.dispatch")

POLL_S = 1.0      # an idle feeder looks at the store again (a backstop: retries poke it)


def _workers(endpoint: Endpoint) -> int:
    """Requests on the wire at most: the server's slots and the queue ahead of them."""
    return endpoint.max_running + endpoint.queue_ahead


class Feeding:
    def __init__(self, astore: AsyncStore, live: LiveSettings, pauses: Pauses, recorder: Recorder,
                 path: RequestPath, figures: DispatchFigures, stalls: StallWindow,
                 clock: Callable[[], float]) -> None:
        self.astore = astore
        self.live = live
        self.pauses = pauses
        self.recorder = recorder
        self.path = path
        self.figures = figures
        self.stalls = stalls
        self.clock = clock
        self.serving: dict[int, Serving] = {}
        # A graceful stop: nothing new is claimed, requests in flight run to the end.
        self.stopping = False

    def poke(self) -> None:
        """Wake every feeder: a pause lifted, a retry made a prompt claimable, a setting
        changed."""
        for s in self.serving.values():
            s.wake.set()

    def _prefetch(self, endpoint: Endpoint) -> int:
        # Read at each look, so a reloaded dispatch.claim_batch applies at once.
        return max(1, min(self.live.config.dispatch.claim_batch, _workers(endpoint)))

    async def serve(self, endpoint: Endpoint, draining: anyio.Event) -> None:
        # Aborts of stalled or looping streams go on a client of their own (the workers' are
        # busy): httpx, as for the daemon's other few requests (supervisor/sglang/abort.py).
        # Made first, off the event loop: a new httpx client reads its CA bundle (tens of ms),
        # and nothing of the life is there yet to leave behind if that wait is cancelled.
        aborts = await anyio.to_thread.run_sync(partial(httpx.AsyncClient, trust_env=False))
        serving = Serving(endpoint, limit=InFlightLimit(endpoint.max_running,
                                                        endpoint.queue_ahead))
        # A new life of the server: its stalls and tokens so far were its last life's.
        progress = self.figures.progress(endpoint.name)
        progress.hung, progress.last_token_at, progress.waiting = None, None, 0
        self.stalls.reset(endpoint.name)
        key = id(serving)
        self.serving[key] = serving
        # The buffer holds what the largest prefetch may claim; the feeder claims up to the
        # live one (`_prefetch`).
        send, recv = anyio.create_memory_object_stream[ClaimedPrompt](_workers(endpoint))
        # The sweeper keeps the server's token clock on `progress` (the hang watchdog's
        # signal) and tells waiting streams from stalled ones by it and SGLang's counter.
        serving.deadlines = StreamDeadlines(partial(abort_stream, aborts, endpoint.base_url),
                                            progress=progress,
                                            server_tokens_at=endpoint.tokens_at)
        try:
            async with anyio.create_task_group() as clock:
                clock.start_soon(serving.deadlines.run)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._wake_on, draining, serving)
                    async with recv:
                        for _ in range(_workers(endpoint)):
                            tg.start_soon(self._worker, serving, recv.clone())
                        own = recv.clone()     # the feeder's, to take buffered prompts back
                    serving.buffer = own
                    async with send, own:
                        await self._feed(serving, send, own, draining)
                    # Workers end once their request is done and the feeder has closed the
                    # buffer.
                clock.cancel_scope.cancel()
        finally:
            progress.waiting = 0
            with anyio.CancelScope(shield=True):
                # First: the requeue below may raise (a full disk) and must not leak it.
                await aborts.aclose()
            del self.serving[key]
            await self._give_back_life(serving, draining)

    async def _give_back_life(self, serving: Serving, draining: anyio.Event) -> None:
        leftover: list[Outcome | Wasted] = [Requeue(pid) for pid in serving.claimed]
        # What the cut-off requests had generated is lost: to a graceful stop or a drain
        # that ran out of time, or to the server failing under them.
        cause = WasteCause.STOP if self.stopping or draining.is_set() else WasteCause.CRASH
        name = serving.endpoint.name
        leftover += [Wasted(cause, tokens, self.clock(), pid, name, estimated=not counted)
                     for pid, (tokens, counted) in serving.cut.items()
                     if tokens > 0 and pid in serving.claimed]
        if not leftover:
            return
        with anyio.CancelScope(shield=True):
            await self.recorder.flush()
            await self.astore.call(Store.record, leftover)
        log.info("%s: %d claimed prompts back to pending", name, len(serving.claimed))
        self.poke()

    async def _wake_on(self, draining: anyio.Event, serving: Serving) -> None:
        await draining.wait()
        serving.wake.set()

    async def _feed(self, serving: Serving, send: Any, recv: Any,
                    draining: anyio.Event) -> None:
        name = serving.endpoint.name
        while True:
            serving.wake = anyio.Event()
            if draining.is_set():
                await self._give_back(serving, recv)
                return
            if self.pauses or self.stopping:
                await self._give_back(serving, recv)
                await serving.wake.wait()
                continue
            prefetch = self._prefetch(serving.endpoint)
            stats = send.statistics()
            space = prefetch - stats.current_buffer_used
            if space >= max(1, prefetch // 4) or (space > 0 and stats.tasks_waiting_receive):
                # Shielded: a claim the store committed must reach `claimed`, or a
                # cancellation on the way back would strand those prompts in_flight.
                with anyio.CancelScope(shield=True):
                    got = await self.astore.call(Store.claim, space, name, self.clock())
                    for prompt in got:
                        serving.claimed[prompt.id] = prompt
                if got:
                    for prompt in got:
                        send.send_nowait(prompt)
                    if len(got) < space:
                        # The store ran dry: a server waiting idle may take over what this
                        # one buffered beyond its free slots (serving.py), now, not at its
                        # next poll.
                        self.poke()
                    continue
                if stats.tasks_waiting_receive and take_over(
                        serving, self.serving.values(), send,
                        min(space, stats.tasks_waiting_receive)):
                    continue
                # Nothing pending: a retry or a requeue elsewhere pokes us; poll as a backstop.
                with anyio.move_on_after(POLL_S):
                    await serving.wake.wait()
                continue
            await serving.wake.wait()

    async def _give_back(self, serving: Serving, recv: Any) -> None:
        back: list[str] = []
        while True:
            try:
                back.append(recv.receive_nowait().id)
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
        if back:
            with anyio.CancelScope(shield=True):
                await self.astore.call(Store.record, [Requeue(i) for i in back])
                for i in back:
                    serving.claimed.pop(i, None)

    async def _worker(self, serving: Serving, recv: Any) -> None:
        # Its own connection to the server (worker_client.py says why), for this life; each
        # request carries the live request timeout itself.
        client = worker_client(self.live.config.dispatch.request_timeout_s)
        try:
            await self._work(serving, recv, client)
        finally:
            with anyio.CancelScope(shield=True):
                await client.close()

    async def _work(self, serving: Serving, recv: Any, client: aiohttp.ClientSession) -> None:
        async with recv:
            async for prompt in recv:
                serving.wake.set()     # a buffer slot freed: the feeder may refill
                assert serving.limit is not None
                # Beyond a lowered limit, wait here (the prompt stays claimed) until a
                # request in flight ends; then the checks below still apply.
                async with serving.limit.slot():
                    if self.stopping or self.pauses:
                        # Buffered but not sent: back to pending, never started during a
                        # stop or a pause (one the breaker opened would only fail again).
                        # (Leaving `claimed` and submitting with no await between, as in
                        # the request path.)
                        del serving.claimed[prompt.id]
                        self.recorder.submit([Requeue(prompt.id)])
                        continue
                    try:
                        await self.path.run(serving, client, prompt)
                    finally:
                        # Cancelled with its server, or ended without an answer: no length
                        # learnt (an answer has already left the estimator's running set).
                        self.figures.eta.dropped(prompt.id)
                        # A slot is free: at the end of a job the feeder may take prompts
                        # over from another server's buffer (serving.py).
                        serving.wake.set()
