"""One prompt's request, from the body sent to the outcome recorded.

`RequestPath.run` builds the chat completion (the live max tokens and generation settings as
they are when it is sent, fixed for the request), posts it (streamed under its own request id,
watched for stalls and loops, or as one POST), turns what came back into an answer
(completion.py), feeds the job's figures, the quality gate and the error breaker, and hands
the outcome to the recorder (group commit). Only this module sends a prompt to a server.

A connection refused or reset usually means the server just died: the fleet notices within a
fraction of a second and cancels the server's life, which requeues the prompt with no attempt
counted. Only if the server is still considered alive after a grace is it a retry.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import anyio

from state.records import ClaimedPrompt, Done, Outcome, Requeue
from state.waste_table import Wasted
from supervisor.config.live_settings import LiveSettings
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.pause_sources import PauseSource
from supervisor.contract.waste_causes import WasteCause
from supervisor.dispatch.answer_tokens import Finished, continued, fresh_tokens, keeps
from supervisor.dispatch.bad_output_pause import BadOutputPause
from supervisor.dispatch.completion import Answer, Completion, Retryable, classify_response
from supervisor.dispatch.dispatch_figures import DispatchFigures
from supervisor.dispatch.dispatch_snapshot import InFlightRequest, StreamFigures
from supervisor.dispatch.error_breaker import ErrorBreaker
from supervisor.dispatch.loop_detector import is_loop
from supervisor.dispatch.outcome import outcome_of
from supervisor.dispatch.pauses import Pauses
from supervisor.dispatch.recorder import Recorder
from supervisor.dispatch.serving import Serving
from supervisor.dispatch.stall_watch import StallWindow
from supervisor.dispatch.stream_answer import StreamAnswer
from supervisor.dispatch.stream_loop_watch import StreamLoopWatch
from supervisor.dispatch.stream_request import Streamed, stream_chat
from supervisor.dispatch.worker_client import WIRE_ERRORS, request_timeout, wire_failure
from supervisor.sglang.chat_request import post_chat, request_body
from supervisor.sglang.continuation import continuation_body
from supervisor.sglang.request_ids import request_id

log = logging.getLogger("supervisor.dispatch")

GONE_GRACE_S = 3.0
# Waits in SGLang's queue past wait_s that a prompt may have requeued in a row for free; the
# next counts as an attempt, so a prompt the server never admits ends failed, never loops.
FREE_WAITS = 10
# Writes one event (kind, subject, detail, actor); folded per server where it floods.
EventSink = Callable[[str, str, dict[str, Any], str], None]


def _with_waste(outcome: Outcome, answer: Answer, server: str,
                at: float) -> list[Outcome | Wasted]:
    """The outcome, after the waste ledger's row for tokens its answer threw away (an abort
    that said how many it had generated), so both land in one transaction."""
    if isinstance(answer, Retryable) and answer.tokens > 0:
        return [Wasted(WasteCause.RETRY, answer.tokens, at, outcome.id, server), outcome]
    return [outcome]


class RequestPath:
    def __init__(self, live: LiveSettings, figures: DispatchFigures, recorder: Recorder,
                 pauses: Pauses, bad_output: BadOutputPause, breaker: ErrorBreaker,
                 stalls: StallWindow, event: EventSink, *, clock: Callable[[], float],
                 gone_grace_s: float = GONE_GRACE_S) -> None:
        self.live = live
        self.figures = figures
        self.recorder = recorder
        self.pauses = pauses
        self.bad_output = bad_output
        self.breaker = breaker
        self.stalls = stalls
        self.event = event
        self.clock = clock
        self.gone_grace_s = gone_grace_s
        self.requests: dict[str, InFlightRequest] = {}    # prompt id -> request on the wire
        # Prompts sent back for waiting in SGLang's queue, and how often in a row: bounded
        # (FREE_WAITS), so a prompt the server never admits ends in attempts, not a loop.
        # An entry lives only while its prompt keeps being requeued this way.
        self.free_waits: dict[str, int] = {}
        # Set by a raise of max tokens with continue: (the new limit, loops too). A request
        # sent before the raise that ends truncated under it is continued at once, as the
        # raise continued the answers recorded before it.
        self.continue_below: tuple[int, bool] | None = None

    async def run(self, serving: Serving, client: aiohttp.ClientSession,
                  prompt: ClaimedPrompt) -> None:
        endpoint = serving.endpoint
        p = self.figures.progress(endpoint.name)
        cfg = self.live.config
        max_tokens = self.live.max_tokens     # fixed for this request, whatever changes meanwhile
        d = cfg.dispatch
        rid = request_id(prompt) if d.stream else None
        thinking = cfg.generation.enable_thinking
        plain = request_body(cfg.job.model, prompt.messages, cfg.generation, max_tokens, rid=rid)
        stored = prompt.stored
        if stored is not None and (rid is None or len(stored.ids.output_ids) >= max_tokens):
            # Unstreamed (no ids come back) or a limit since lowered to what it has: the
            # stored part cannot be continued, the prompt runs again from its start.
            log.info("%s: prompt %s runs from its start, not continued (%s)", endpoint.name,
                     prompt.id, "dispatch.stream is off" if rid is None else
                     f"max tokens {max_tokens} is not above its {len(stored.ids.output_ids)}")
            stored = None
        if stored is not None:
            plain = continuation_body(plain, stored, max_tokens, thinking)
        body = json.dumps(plain, ensure_ascii=False).encode()
        timeout = d.request_timeout_s
        started = self.clock()
        self.figures.eta.started(prompt.id, max_tokens, started)
        p.in_flight += 1
        p.peak_in_flight = max(p.peak_in_flight, p.in_flight)
        p.last_request_started_at = time.monotonic()
        self.requests[prompt.id] = InFlightRequest(endpoint.name, p.last_request_started_at,
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
                async with post_chat(client, endpoint.base_url, body,
                                     request_timeout(timeout)) as resp:
                    answer = classify_response(
                        resp.status, (await resp.read()).decode("utf-8", "replace"))
        except WIRE_ERRORS as exc:
            answer, gone = wire_failure(exc, timeout)
        except anyio.get_cancelled_exc_class():
            serving.cut[prompt.id] = (sa.tokens, sa.counted)
            raise
        finally:
            p.in_flight -= 1
            self.requests.pop(prompt.id, None)
        if gone is not None:
            try:
                await anyio.sleep(self.gone_grace_s)   # cancelled if the server really went away
            except anyio.get_cancelled_exc_class():
                serving.cut[prompt.id] = (sa.tokens, sa.counted)
                raise
            answer = Retryable(f"connection to {endpoint.name} failed: {gone}", "connection")
        assert answer is not None
        done = Finished(answer)
        if streamed is not None and isinstance(answer, Completion):
            if stored is not None:
                done = await continued(client, endpoint.base_url, stored, answer, sa,
                                       thinking, timeout)
                answer = done.answer
            elif keeps(answer, cfg.job.keep_token_ids == "all"):
                done = Finished(answer, fresh_tokens(answer, sa, thinking))
        finished = self.clock()
        if streamed is not None:
            self._watched(endpoint.name, prompt.id, rid, streamed, max_tokens)
        if self._queued_not_failed(prompt.id, streamed, endpoint.queueing()):
            # The silence was SGLang's queue, not the prompt's fault or the job's: back to
            # pending, no attempt counted, and nothing for the error breaker (a queue that
            # outlasts wait_s is over-commitment, which the saturation guard answers).
            outcome: Outcome = Requeue(prompt.id)
        else:
            outcome = self._outcome(prompt, done, endpoint.name, max_tokens, started,
                                    finished, aborted_loop=streamed is not None
                                    and streamed.loop is not None)
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
        self.recorder.submit(waste + _with_waste(outcome, answer, endpoint.name, finished))
        p.completed += 1
        if isinstance(outcome, Done):
            p.answered += 1
            if isinstance(answer, Completion):
                # What the job keeps from this server: a continuation's earlier part was
                # decoded elsewhere (the tuner compares servers by it).
                p.kept_tokens += answer.completion_tokens if done.decoded is None \
                    else done.decoded
        p.last_completion_at = time.monotonic()

    def _queued_not_failed(self, prompt_id: str, streamed: Streamed | None,
                           queueing: bool) -> bool:
        """Whether a stall abort was a wait in SGLang's queue: the server made tokens for
        others meanwhile (not `server_silent`), and either SGLang says it queues or retracts
        (`queueing`), or the request never got a token — SGLang admits in order, so a request
        with none while others decode was never admitted (its queue gauge can be seconds
        stale: it is set at each prefill and every 40 decode steps). A stream stuck halfway
        on a server that does not queue is the request's own failure: an attempt."""
        if streamed is None or not streamed.stalled:
            self.free_waits.pop(prompt_id, None)
            return False
        if not (queueing or (not streamed.server_silent and streamed.tokens == 0)):
            self.free_waits.pop(prompt_id, None)
            return False
        n = self.free_waits.get(prompt_id, 0) + 1
        if n > FREE_WAITS:
            self.free_waits.pop(prompt_id, None)
            return False
        self.free_waits[prompt_id] = n
        return True

    def _watched(self, server: str, prompt_id: str, rid: str | None, streamed: Streamed,
                 max_tokens: int) -> None:
        """What watching the stream found: a stall (event; enough of them and the server is
        hung) or a loop aborted while it ran (event; tokens saved)."""
        f = self.figures.streamed
        d = self.live.config.dispatch
        if streamed.stalled:
            self.figures.streamed = StreamFigures(f.stalls + 1, f.loops_aborted,
                                                  f.loop_tokens_saved)
            silent = d.stall_s if streamed.server_silent else d.wait_s
            log.warning("%s: prompt %s stalled after %d tokens (no token for %g s%s): aborted "
                        "as %s, will be retried", server, prompt_id, streamed.tokens, silent,
                        "" if streamed.server_silent else
                        ", waiting while the server streamed for others", rid)
            self.event(EventKind.REQUEST_STALLED, server,
                       {"prompt": prompt_id, "rid": rid, "tokens": streamed.tokens,
                        "stall_s": silent, "waited": streamed.waited}, "supervisor")
            # Only a silent server's stalls add up to a hang: a request that waited while
            # the server streamed for others says nothing against the server.
            if not streamed.server_silent:
                return
            hung = self.stalls.stalled(server, time.monotonic())
            p = self.figures.progress(server)
            if hung is not None and p.hung is None:
                log.error("%s: %s", server, hung)
                p.hung = hung
        elif streamed.loop is not None and isinstance(streamed.answer, Completion):
            saved = max(0, max_tokens - streamed.answer.completion_tokens)
            self.figures.streamed = StreamFigures(f.stalls, f.loops_aborted + 1,
                                                  f.loop_tokens_saved + saved)
            v = streamed.loop
            self.event(EventKind.LOOP_ABORTED, server,
                       {"prompt": prompt_id, "rid": rid, "part": v.part,
                        "tokens": streamed.answer.completion_tokens, "saved": saved,
                        "snippet": v.snippet[:120]}, "supervisor")

    def _outcome(self, prompt: ClaimedPrompt, done: Finished, server: str, max_tokens: int,
                 started: float, finished: float, aborted_loop: bool = False) -> Outcome:
        figures = self.figures
        p = figures.progress(server)
        loop = False
        answer = done.answer
        if isinstance(answer, Completion):
            figures.eta.finished(prompt.id, answer.completion_tokens,
                                 answer.finish_reason == "length", finished)
            # A loop aborted while it ran is one by the stream's watch; it is recorded as
            # cut off (finish_reason length) so it counts in the loop rate and is re-run
            # only by a requeue that includes loops.
            loop = aborted_loop or is_loop(answer.content, answer.reasoning_content,
                                           answer.finish_reason)
            # The rates are decoding's: a continuation decoded its new part only.
            decoded = answer.completion_tokens if done.decoded is None else done.decoded
            figures.rates.add(finished, 1, decoded)
            figures.lengths.add(answer.completion_tokens)
            assert p.rates is not None
            p.rates.add(finished, 1, decoded)
            self.bad_output.observe(answer, loop)
            self.breaker.observe_ok(server)
        else:
            p.errors += 1
            p.last_error = answer.error
            if self._breaker_holds(answer, server):
                # The breaker is open (or opened on this answer): the fault is the job's
                # setting or its servers, not this prompt. Back to pending, no attempt
                # counted, so nothing is failed while an operator looks.
                return Requeue(prompt.id)
        cfg = self.live.config
        return outcome_of(prompt, answer, server=server, model=cfg.job.model,
                          max_tokens=max_tokens, max_attempts=cfg.dispatch.max_attempts,
                          started=started, finished=finished, loop=loop, tokens=done.tokens,
                          continued_from=done.continued_from,
                          continue_now=self._continue_now(answer, done, max_tokens, loop))

    def _continue_now(self, answer: Answer, done: Finished, max_tokens: int,
                      loop: bool) -> bool:
        """An answer cut off under a limit raised with continue while it ran: continued at
        once, as the raise continued the ones recorded before it."""
        below = self.continue_below
        return (below is not None and done.tokens is not None
                and isinstance(answer, Completion) and answer.finish_reason == "length"
                and max_tokens < below[0] and (below[1] or not loop))

    def _breaker_holds(self, answer: Answer, server: str) -> bool:
        """Feed one error to the breaker; true while it is open."""
        assert not isinstance(answer, Completion)
        reason = self.breaker.observe_error(answer.kind, answer.error, server)
        if reason is not None and self.pauses.hold(PauseSource.BREAKER, reason):
            trip = self.breaker.trip
            assert trip is not None
            # The event names the error and carries one whole message, so an operator sees
            # what to fix without reading the server logs.
            self.event(EventKind.PAUSED, PauseSource.BREAKER,
                       {"reason": reason, "error": trip.kind, "sample": trip.sample,
                        "errors": trip.counts, "servers": trip.servers}, "supervisor")
        return self.breaker.open
