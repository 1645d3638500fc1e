"""The dispatcher: keeps every READY server's slots full and records each outcome.

Per server, `serve()` runs one feeder and `max_running` workers. The feeder claims pending
prompts from the store in batches into a small local buffer (so a finished slot is refilled
at once, without waiting for a store round trip); each worker takes a prompt, posts one chat
completion and hands the outcome to the recorder (group commit). Paused or draining, the
feeder stops claiming and gives the buffered prompts back. When serve() is cancelled (the
server left READY), everything it claimed and did not finish goes back to pending without
counting an attempt: the server's death is not the prompt's fault.
"""

from __future__ import annotations

import json
import logging
import random
import time
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, AsyncIterator, Callable

import aiohttp
import anyio

from state.records import ClaimedPrompt, Outcome, Requeue, Retry
from state.settings_keys import Setting
from state.store import Store
from state.waste_table import Wasted
from supervisor.config import JobConfig
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.waste_causes import WasteCause
from supervisor.dispatch.bad_output_pause import BadOutputPause
from supervisor.dispatch.completion import (Answer, Completion, Retryable, classify_response,
                                            request_body)
from supervisor.dispatch.error_breaker import ErrorBreaker
from supervisor.dispatch.event_fold import EventFold
from supervisor.dispatch.inflight_limit import InFlightLimit
from supervisor.dispatch.length_eta import LengthEta
from supervisor.dispatch.loop_detector import is_loop
from supervisor.dispatch.rate_window import CompletionRateWindow
from supervisor.dispatch.outcome import outcome_of
from supervisor.dispatch.output_lengths import LengthWindow
from supervisor.dispatch.dispatch_snapshot import (DispatchSnapshot, InFlightRequest,
                                                   ServerProgress, StreamFigures)
from supervisor.dispatch.quality import QualityGate
from supervisor.dispatch.recorder import Recorder
from supervisor.dispatch.stall_watch import StallWindow
from supervisor.dispatch.stream_answer import StreamAnswer
from supervisor.dispatch.stream_loop_watch import StreamLoopWatch
from supervisor.dispatch.stream_deadlines import StreamDeadlines
from supervisor.dispatch.serving import Serving, take_over
from supervisor.dispatch.stream_request import (ABORT_TIMEOUT_S, Streamed, abort_request,
                                                stream_chat)
from supervisor.dispatch.worker_client import (JSON_HEADERS, WIRE_ERRORS, wire_failure,
                                               worker_client)
from supervisor.servers.endpoint import Endpoint

log = logging.getLogger("supervisor.dispatch")

# A connection refused/reset usually means the server just died; the fleet notices within
# a fraction of a second and cancels serve(), which requeues the prompt with no attempt
# counted. Only if the server is still considered alive after this grace is it a retry.
GONE_GRACE_S = 3.0
BREAKER = "breaker"        # the pause key of the circuit breaker (error_breaker.py)


def request_id(prompt: ClaimedPrompt) -> str:
    """The request id a streamed attempt runs under: the prompt id and the attempt number,
    so the server's log lines match ours, and a random tail. SGLang aborts every request
    whose id *starts with* the one named (`sglang/srt/managers/scheduler.py` abort_request),
    so no id may be a prefix of another: the fixed-length random tail sees to that. Not a
    secret, only distinct: Python's generator, not a system call per request (os.urandom was
    4% of the daemon's time per streamed request, benchmarks/bench_dispatch.py)."""
    return f"{prompt.id}#{prompt.attempts + 1}#{random.getrandbits(48):012x}"


def _with_waste(outcome: Outcome, answer: Answer, server: str,
                at: float) -> list[Outcome | Wasted]:
    """The outcome, after the waste ledger's row for tokens its answer threw away (an abort
    that said how many it had generated), so both land in one transaction."""
    if isinstance(answer, Retryable) and answer.tokens > 0:
        return [Wasted(WasteCause.RETRY, answer.tokens, at, outcome.id, server), outcome]
    return [outcome]


class Dispatcher:
    def __init__(self, astore: Any, config: JobConfig, *,
                 clock: Callable[[], float] = time.time,
                 gone_grace_s: float = GONE_GRACE_S) -> None:
        self.astore = astore
        self.gone_grace_s = gone_grace_s
        self.config = config
        self.clock = clock
        self.max_tokens = config.generation.max_tokens
        q = config.quality
        self.quality = QualityGate(q.window, q.min_samples, q.max_bad_rate,
                                   q.max_truncation_rate, q.max_loop_rate,
                                   q.max_thinking_truncated_rate)
        d = config.dispatch
        self.breaker = ErrorBreaker(d.breaker_window, d.breaker_min_samples, d.breaker_error_rate)
        self.started_at = clock()
        self.rates = CompletionRateWindow(q.metrics_window_s, self.started_at)
        self.lengths = LengthWindow()
        self.eta = LengthEta(busy_window_s=q.metrics_window_s, clock=clock)
        self._progress: dict[str, ServerProgress] = {}
        self._serving: dict[int, Serving] = {}
        self._paused: dict[str, str] = {}
        # A graceful stop: nothing new is claimed, requests in flight run to the end.
        self._stopping = False
        self._requests: dict[str, InFlightRequest] = {}    # prompt id -> request on the wire
        self._bad_output = BadOutputPause(self.quality, config.generation.enable_thinking,
                                          self._paused, self._paused_on_bad_output)
        self._recorder = Recorder(self._write, on_committed=self._after_commit)
        self._tg: anyio.abc.TaskGroup | None = None
        self._stalls = StallWindow(d.stall_hang_count, d.stall_hang_window_s)
        self._streamed = StreamFigures()
        # Per-request events (loops aborted, stalls) folded to one row per server per window.
        self._fold = EventFold(lambda *e: self.astore.call(Store.add_event, *e), clock=clock)

    # -- lifetime -----------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Dispatcher]:
        """The recorder lives here; serve() may only run inside."""
        saved = await self.astore.call(Store.get_setting, Setting.MAX_TOKENS)
        if saved is not None:
            self.max_tokens = int(saved)
        paused = await self.astore.call(Store.get_setting, Setting.OPERATOR_PAUSE)
        if paused:
            self._paused["operator"] = paused
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._recorder.run, name="recorder")
                tg.start_soon(self._fold.run, name="event-fold")
                try:
                    yield self
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._fold.close()
                        await self._recorder.close()
        finally:
            self._tg = None

    async def _write(self, outcomes: list[Any]) -> None:
        await self.astore.call(Store.record, outcomes)

    def _after_commit(self, batch: list[Any]) -> None:
        # A retry makes its prompt claimable again: wake idle feeders.
        if any(isinstance(o, Retry) for o in batch):
            self.poke()

    async def flush(self) -> None:
        await self._recorder.flush()

    def _event(self, kind: str, subject: str, detail: dict[str, Any], actor: str) -> None:
        folded = self._fold.admit(kind, subject, detail, actor, self.clock())
        if folded is None:
            return
        detail = folded

        async def add() -> None:
            await self.astore.call(Store.add_event, kind, subject, detail, actor, self.clock())
        if self._tg is not None:
            self._tg.start_soon(add)

    # -- what others read ---------------------------------------------------------------------

    def progress(self, name: str) -> ServerProgress:
        p = self._progress.get(name)
        if p is None:
            p = self._progress[name] = ServerProgress(
                rates=CompletionRateWindow(self.config.quality.metrics_window_s, self.clock()))
        return p

    def snapshot(self) -> DispatchSnapshot:
        now = self.clock()
        return DispatchSnapshot(
            max_tokens=self.max_tokens, paused=dict(self._paused),
            in_flight=sum(p.in_flight for p in self._progress.values()),
            rates=self.rates.snapshot(now),
            per_server={n: p.rates.snapshot(now) for n, p in self._progress.items()
                        if p.rates is not None},
            quality=self.quality.snapshot(), breaker=self.breaker.snapshot(),
            streamed=self._streamed)

    @property
    def paused(self) -> bool:
        return bool(self._paused)

    # -- graceful stop and reload --------------------------------------------------------------

    def stop_claiming(self) -> None:
        """The first step of a graceful stop: claim and send nothing more, give buffered
        prompts back; requests in flight run to their end."""
        self._stopping = True
        self.poke()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def inflight_limit(self, server: str) -> InFlightLimit | None:
        """The live in-flight limit of `server`'s READY life (None when not serving it)."""
        return next((s.limit for s in self._serving.values()
                     if s.endpoint.name == server), None)

    def in_flight_requests(self) -> list[InFlightRequest]:
        return list(self._requests.values())

    def completed_total(self) -> int:
        """Outcomes of any kind since the daemon started."""
        return sum(p.completed for p in self._progress.values())

    def server_tok_per_s(self) -> dict[str, float]:
        now = self.clock()
        return {n: p.rates.snapshot(now).tok_per_s for n, p in self._progress.items()
                if p.rates is not None}

    def use_config(self, config: JobConfig) -> None:
        """A reloaded config: generation settings and dispatch limits apply to requests sent
        from now on, quality thresholds to the next completion. max_tokens is not taken
        from here: it changes through set_max_tokens, like an operator's action."""
        self.config = config
        q = config.quality
        self.quality.min_samples = q.min_samples
        self.quality.max_bad_rate = q.max_bad_rate
        self.quality.max_truncation_rate = q.max_truncation_rate
        self.quality.max_loop_rate = q.max_loop_rate
        self.quality.max_thinking_truncated_rate = q.max_thinking_truncated_rate
        d = config.dispatch
        self.breaker.window = d.breaker_window
        self.breaker.min_samples = d.breaker_min_samples
        self.breaker.max_error_rate = d.breaker_error_rate
        self._stalls.stalls, self._stalls.window_s = d.stall_hang_count, d.stall_hang_window_s
        self._bad_output.thinking = config.generation.enable_thinking
        self.poke()

    # -- operator actions (the control socket calls these) -------------------------------------

    def poke(self) -> None:
        for s in self._serving.values():
            s.wake.set()

    async def pause(self, key: str, reason: str, actor: str) -> None:
        """Stop claiming new prompts; in-flight requests finish. `key` names the cause
        (operator, quality, disk) so each is lifted on its own."""
        if self._paused.get(key) == reason:
            return
        self._paused[key] = reason
        log.warning("dispatch paused (%s): %s", key, reason)
        if key == "operator":
            await self.astore.call(Store.set_setting, Setting.OPERATOR_PAUSE, reason)
        await self.astore.call(Store.add_event, EventKind.PAUSED, key, {"reason": reason}, actor,
                               self.clock())
        self.poke()

    async def resume(self, key: str, actor: str) -> bool:
        if key not in self._paused:
            return False
        reason = self._paused.pop(key)
        if key == "operator":
            await self.astore.call(Store.set_setting, Setting.OPERATOR_PAUSE, "")
        if key == "quality":
            # Resuming after a quality pause means the operator fixed (or accepts) the cause;
            # the old window would trip the gate again at the very next completion.
            self.quality.reset()
        if key == BREAKER:
            # The same for the breaker: its window is full of the errors that opened it.
            self.breaker.reset()
        log.info("dispatch resumed (%s)", key)
        await self.astore.call(Store.add_event, EventKind.RESUMED, key, {"was": reason}, actor,
                               self.clock())
        self.poke()
        return True

    async def set_max_tokens(self, value: int, actor: str) -> int:
        """Applies to requests sent from now on; in-flight ones finish at their old limit."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {value!r}")
        # SGLang refuses (HTTP 400, a permanent failure here) every request whose prompt
        # plus max_tokens reaches the context length, so a limit at or past it would fail
        # the whole job; refuse it instead.
        context = self.config.servers.context_length
        if context is not None and value >= context:
            raise ValueError(f"max_tokens {value} is not below the servers' context length "
                             f"({context}): SGLang would refuse every request")
        old, self.max_tokens = self.max_tokens, value
        await self.astore.call(Store.set_setting, Setting.MAX_TOKENS, str(value))
        await self.astore.call(Store.add_event, EventKind.MAX_TOKENS, "generation",
                               {"from": old, "to": value}, actor, self.clock())
        return old

    async def requeue_truncated(self, actor: str, include_loops: bool = False) -> int:
        """Re-run every prompt that ended with finish_reason length under a lower limit than
        the current one; its new result replaces its line in its shard. Degenerate loops
        are left alone unless `include_loops`: they would loop again, at the new limit."""
        count = await self.astore.call(Store.requeue_truncated, self.max_tokens, include_loops)
        await self.astore.call(Store.add_event, EventKind.REQUEUE_TRUNCATED, "generation",
                               {"count": count, "below_max_tokens": self.max_tokens,
                                "include_loops": include_loops}, actor, self.clock())
        self.poke()
        return count

    # -- serving one endpoint ----------------------------------------------------------------

    async def serve(self, endpoint: Endpoint, draining: anyio.Event) -> None:
        serving = Serving(endpoint, limit=InFlightLimit(endpoint.max_running))
        # A new life of the server: its stalls and tokens so far were its last life's.
        progress = self.progress(endpoint.name)
        progress.hung, progress.last_token_at, progress.waiting = None, None, 0
        self._stalls.reset(endpoint.name)
        key = id(serving)
        self._serving[key] = serving
        prefetch = max(1, min(self.config.dispatch.claim_batch, endpoint.max_running))
        send, recv = anyio.create_memory_object_stream[ClaimedPrompt](prefetch)
        # Aborts of stalled streams go on a connection of their own (the workers' are busy).
        aborts = worker_client(ABORT_TIMEOUT_S)
        # The sweeper keeps the server's token clock on `progress` (the hang watchdog's
        # signal) and tells waiting streams from stalled ones by it and SGLang's counter.
        serving.deadlines = StreamDeadlines(partial(abort_request, aborts, endpoint.base_url),
                                            progress=progress,
                                            server_tokens_at=endpoint.tokens_at)
        try:
            async with anyio.create_task_group() as clock:
                clock.start_soon(serving.deadlines.run)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._wake_on, draining, serving)
                    async with recv:
                        for _ in range(endpoint.max_running):
                            tg.start_soon(self._worker, serving, recv.clone())
                        own = recv.clone()     # the feeder's, to take buffered prompts back
                    serving.buffer = own
                    async with send, own:
                        await self._feed(serving, send, own, draining, prefetch)
                    # Workers end once their request is done and the feeder has closed the
                    # buffer.
                clock.cancel_scope.cancel()
        finally:
            progress.waiting = 0
            with anyio.CancelScope(shield=True):
                # First: the requeue below may raise (a full disk) and must not leak it.
                await aborts.close()
            del self._serving[key]
            leftover: list[Outcome | Wasted] = [Requeue(pid) for pid in serving.claimed]
            # What the cut-off requests had generated is lost: to a graceful stop or a
            # drain that ran out of time, or to the server failing under them.
            cause = WasteCause.STOP if self._stopping or draining.is_set() else WasteCause.CRASH
            leftover += [Wasted(cause, tokens, self.clock(), pid, endpoint.name,
                                estimated=not counted)
                         for pid, (tokens, counted) in serving.cut.items()
                         if tokens > 0 and pid in serving.claimed]
            if leftover:
                with anyio.CancelScope(shield=True):
                    await self.flush()
                    await self.astore.call(Store.record, leftover)
                log.info("%s: %d claimed prompts back to pending", endpoint.name,
                         len(serving.claimed))
                self.poke()

    async def _wake_on(self, draining: anyio.Event, serving: Serving) -> None:
        await draining.wait()
        serving.wake.set()

    async def _feed(self, serving: Serving, send: Any, recv: Any, draining: anyio.Event,
                    prefetch: int) -> None:
        name = serving.endpoint.name
        refill_at = max(1, prefetch // 4)
        while True:
            serving.wake = anyio.Event()
            if draining.is_set():
                await self._give_back(serving, recv)
                return
            if self._paused or self._stopping:
                await self._give_back(serving, recv)
                await serving.wake.wait()
                continue
            stats = send.statistics()
            space = prefetch - stats.current_buffer_used
            if space >= refill_at or (space > 0 and stats.tasks_waiting_receive):
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
                        serving, self._serving.values(), send,
                        min(space, stats.tasks_waiting_receive)):
                    continue
                # Nothing pending: a retry or a requeue elsewhere pokes us; poll as a backstop.
                with anyio.move_on_after(1.0):
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
        # Its own connection to the server (worker_client.py says why), for this life.
        client = worker_client(self.config.dispatch.request_timeout_s)
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
                    if self._stopping or self._paused:
                        # Buffered but not sent: back to pending, never started during a
                        # stop or a pause (one the breaker opened would only fail again).
                        # (Leaving `claimed` and submitting with no await between, as in _one.)
                        del serving.claimed[prompt.id]
                        self._recorder.submit([Requeue(prompt.id)])
                        continue
                    try:
                        await self._one(serving, client, prompt)
                    finally:
                        # Cancelled with its server, or ended without an answer: no length
                        # learnt (an answer has already left the estimator's running set).
                        self.eta.dropped(prompt.id)
                        # A slot is free: at the end of a job the feeder may take prompts
                        # over from another server's buffer (serving.py).
                        serving.wake.set()

    async def _one(self, serving: Serving, client: aiohttp.ClientSession,
                   prompt: ClaimedPrompt) -> None:
        endpoint = serving.endpoint
        p = self.progress(endpoint.name)
        gen = self.config.generation
        max_tokens = self.max_tokens     # fixed for this request, whatever changes meanwhile
        d = self.config.dispatch
        rid = request_id(prompt) if d.stream else None
        body = json.dumps(request_body(self.config.job.model, prompt.messages, gen, max_tokens,
                                       rid=rid), ensure_ascii=False).encode()
        timeout = d.request_timeout_s
        started = self.clock()
        self.eta.started(prompt.id, max_tokens, started)
        p.in_flight += 1
        p.peak_in_flight = max(p.peak_in_flight, p.in_flight)
        p.last_request_started_at = time.monotonic()
        self._requests[prompt.id] = InFlightRequest(endpoint.name, p.last_request_started_at,
                                                    max_tokens)
        gone: str | None = None
        streamed: Streamed | None = None
        sa = StreamAnswer()          # what has streamed in, read if the request is cut off
        try:
            if rid is not None:
                assert serving.deadlines is not None
                streamed = await stream_chat(client, endpoint.base_url, body, rid,
                                             stall_s=d.stall_s, timeout_s=timeout,
                                             watch=StreamLoopWatch(),
                                             deadlines=serving.deadlines, sa=sa,
                                             wait_s=d.wait_s)
                answer, gone = streamed.answer, streamed.gone
            else:
                async with client.post(endpoint.base_url + "/v1/chat/completions",
                                       data=body, headers=JSON_HEADERS) as resp:
                    answer = classify_response(
                        resp.status, (await resp.read()).decode("utf-8", "replace"))
        except WIRE_ERRORS as exc:
            answer, gone = wire_failure(exc, timeout)
        except anyio.get_cancelled_exc_class():
            serving.cut[prompt.id] = (sa.tokens, sa.counted)
            raise
        finally:
            p.in_flight -= 1
            self._requests.pop(prompt.id, None)
        if gone is not None:
            try:
                await anyio.sleep(self.gone_grace_s)   # cancelled if the server really went away
            except anyio.get_cancelled_exc_class():
                serving.cut[prompt.id] = (sa.tokens, sa.counted)
                raise
            answer = Retryable(f"connection to {endpoint.name} failed: {gone}", "connection")
        assert answer is not None
        finished = self.clock()
        if streamed is not None:
            self._watched(endpoint.name, prompt.id, rid, streamed, max_tokens)
        outcome = self._outcome(prompt, answer, endpoint.name, max_tokens, started, finished,
                                aborted_loop=streamed is not None and streamed.loop is not None)
        if streamed is not None and streamed.stalled and endpoint.queueing():
            # SGLang queues or retracts on this server: the silence was the server's
            # over-commitment, not the prompt's fault. Back to pending, no attempt counted.
            outcome = Requeue(prompt.id)
        waste: list[Outcome | Wasted] = []
        if isinstance(answer, Retryable) and not answer.tokens and sa.tokens:
            # Tokens streamed before a stall, an error chunk, a timeout or a lost connection
            # (an abort's own usage is answer.tokens, recorded by _with_waste).
            cause = WasteCause.STALL if streamed is not None and streamed.stalled \
                else WasteCause.RETRY
            waste.append(Wasted(cause, sa.tokens, finished, prompt.id, endpoint.name,
                                estimated=not sa.counted))
        # No await between leaving `claimed` and submitting: a cancellation can never see
        # a prompt that is in neither place.
        del serving.claimed[prompt.id]
        self._recorder.submit(waste + _with_waste(outcome, answer, endpoint.name, finished))
        p.completed += 1
        p.last_completion_at = time.monotonic()

    def _watched(self, server: str, prompt_id: str, rid: str | None, streamed: Streamed,
                 max_tokens: int) -> None:
        """What watching the stream found: a stall (event; enough of them and the server is
        hung) or a loop aborted while it ran (event; tokens saved)."""
        f = self._streamed
        if streamed.stalled:
            self._streamed = StreamFigures(f.stalls + 1, f.loops_aborted, f.loop_tokens_saved)
            d = self.config.dispatch
            silent = d.stall_s if streamed.server_silent else d.wait_s
            log.warning("%s: prompt %s stalled after %d tokens (no token for %g s%s): aborted "
                        "as %s, will be retried", server, prompt_id, streamed.tokens, silent,
                        "" if streamed.server_silent else
                        ", waiting while the server streamed for others", rid)
            self._event(EventKind.REQUEST_STALLED, server,
                        {"prompt": prompt_id, "rid": rid, "tokens": streamed.tokens,
                         "stall_s": silent, "waited": streamed.waited}, "supervisor")
            # Only a silent server's stalls add up to a hang: a request that waited while
            # the server streamed for others says nothing against the server.
            if not streamed.server_silent:
                return
            hung = self._stalls.stalled(server, time.monotonic())
            p = self.progress(server)
            if hung is not None and p.hung is None:
                log.error("%s: %s", server, hung)
                p.hung = hung
        elif streamed.loop is not None and isinstance(streamed.answer, Completion):
            saved = max(0, max_tokens - streamed.answer.completion_tokens)
            self._streamed = StreamFigures(f.stalls, f.loops_aborted + 1,
                                           f.loop_tokens_saved + saved)
            v = streamed.loop
            self._event(EventKind.LOOP_ABORTED, server,
                        {"prompt": prompt_id, "rid": rid, "part": v.part,
                         "tokens": streamed.answer.completion_tokens, "saved": saved,
                         "snippet": v.snippet[:120]}, "supervisor")

    def _outcome(self, prompt: ClaimedPrompt, answer: Answer, server: str, max_tokens: int,
                 started: float, finished: float, aborted_loop: bool = False) -> Outcome:
        p = self.progress(server)
        loop = False
        if isinstance(answer, Completion):
            self.eta.finished(prompt.id, answer.completion_tokens,
                              answer.finish_reason == "length", finished)
            # A loop aborted while it ran is one by the stream's watch; it is recorded as
            # cut off (finish_reason length) so it counts in the loop rate and is re-run
            # only by a requeue that includes loops.
            loop = aborted_loop or is_loop(answer.content, answer.reasoning_content,
                                           answer.finish_reason)
            self.rates.add(finished, 1, answer.completion_tokens)
            self.lengths.add(answer.completion_tokens)
            assert p.rates is not None
            p.rates.add(finished, 1, answer.completion_tokens)
            self._bad_output.observe(answer, loop)
            self.breaker.observe_ok(server)
        else:
            p.errors += 1
            p.last_error = answer.error
            if self._breaker_holds(answer, server):
                # The breaker is open (or opened on this answer): the fault is the job's
                # setting or its servers, not this prompt. Back to pending, no attempt
                # counted, so nothing is failed while an operator looks.
                return Requeue(prompt.id)
        return outcome_of(prompt, answer, server=server, model=self.config.job.model,
                          max_tokens=max_tokens, max_attempts=self.config.dispatch.max_attempts,
                          started=started, finished=finished, loop=loop)

    def _breaker_holds(self, answer: Answer, server: str) -> bool:
        """Feed one error to the breaker; true while it is open."""
        assert not isinstance(answer, Completion)
        reason = self.breaker.observe_error(answer.kind, answer.error, server)
        if reason is not None and BREAKER not in self._paused:
            self._paused[BREAKER] = reason
            trip = self.breaker.trip
            assert trip is not None
            log.error("dispatch paused: %s", reason)
            # The event names the error and carries one whole message, so an operator sees
            # what to fix without reading the server logs.
            self._event(EventKind.PAUSED, BREAKER,
                        {"reason": reason, "error": trip.kind, "sample": trip.sample,
                         "errors": trip.counts, "servers": trip.servers}, "supervisor")
            self.poke()
        return self.breaker.open

    def _paused_on_bad_output(self, reason: str, problems: tuple[str, ...]) -> None:
        self._event(EventKind.PAUSED, "quality", {"reason": reason, "problems": list(problems)},
                    "quality-gate")
        self.poke()
