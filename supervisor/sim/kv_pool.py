"""The KV pool and the waiting queue, as SGLang 0.5.23's scheduler runs them: requests are
admitted while their tokens fit, the rest wait with no output, and when the running ones
outgrow the pool the newest go back to the queue (retraction), keeping what they generated.

Admission (`sglang/srt/managers/schedule_policy.py` PrefillAdder): the pool left for a new
request is what is free (`sglang/srt/mem_cache/prefill_budget.py` remaining_total) less, for
every running request, the tokens it may still write, clipped at CLIP_MAX_NEW_TOKENS (4096)
and scaled by the scheduler's `new_token_ratio` (`_get_running_request_total_token_offset`,
schedule_policy.py:785; 1.0 for an `ignore_eos` request, which reserves its whole budget).
The new request itself must fit whole: its input (prompt, plus what it generated before a
retraction) and its clipped max new tokens, strictly less than what is left (add_one_req,
schedule_policy.py:1395; check_prefill, prefill_budget.py:128). The queue is first come
first served and stops at the first request that does not fit, as the adder stops at
NO_TOKEN.

The ratio (`sglang/srt/managers/scheduler_components/new_token_ratio_tracker.py`): starts
at SGLANG_INIT_NEW_TOKEN_RATIO 0.7, falls by (0.7 - 0.7 * 0.14) / 600 a decode step
(environ.py:646-648) to its floor 0.098, so the scheduler admits more as it sees answers
end early; after a retraction it is reset to (tokens decoded + 20 per request) / (max new
tokens + 1) over the requests kept (SGLANG_RETRACT_DECODE_STEPS, environ.py:649).

Retraction (`sglang/srt/managers/schedule_batch.py` retract_decode, :3451): when the next
decode step (one token per running request) does not fit, requests are taken out in the
order of _get_decode_retraction_order (:3542: fewest output tokens first, then the longest
prompt), at least one, until the rest fit, always keeping one; the scheduler logs "KV cache
pool is full. Retract requests. ..." (`sglang/srt/managers/scheduler.py`:4526) and puts
them at the back of the waiting queue (_add_request_to_queue, :3480). A retracted request
keeps its output tokens (reset_for_retract keeps output_ids) and re-prefills them when it
is admitted again, so its client sees a pause, then the rest, nothing lost or repeated.

Not imitated: prefix caching (nothing is evictable), pages (page size 1), chunked prefill.
One simplification of the simulator's own: a request alone in the scheduler is admitted
even when its budget is larger than the pool, so a test with a tiny pool cannot wedge.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

CLIP_MAX_NEW_TOKENS = 4096          # schedule_policy.py:89 SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
INIT_NEW_TOKEN_RATIO = 0.7          # environ.py:646
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14          # environ.py:647
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600   # environ.py:648
RETRACT_DECODE_STEPS = 20           # environ.py:649

_order = itertools.count()


@dataclass(eq=False)
class Seat:
    """One request's claim on the scheduler, from arrival to its last token."""
    prompt_tokens: int
    max_new_tokens: int             # the generation budget (what the client may get)
    ignore_eos: bool = False
    arrival: int = field(default_factory=lambda: next(_order))
    generated: float = 0.0          # tokens written so far; kept across a retraction
    running: bool = False
    retractions: int = 0
    admitted: anyio.Event = field(default_factory=anyio.Event)
    retracted: anyio.Event = field(default_factory=anyio.Event)
    _from_steps: float | None = None    # the meter's steps when it last started decoding

    def tokens(self, steps: float) -> float:
        """Output tokens now (`steps`: the decode meter's per-request step count)."""
        live = steps - self._from_steps if self._from_steps is not None else 0.0
        return min(float(self.max_new_tokens), self.generated + max(0.0, live))


@dataclass
class Retracted:
    """One retraction, for the log line and the metrics."""
    reqs: int
    input_tokens: int
    output_tokens: int
    tokens_gained: int
    old_ratio: float
    new_ratio: float


class KVPool:
    def __init__(self, capacity: int, max_running: int, steps: Callable[[], float],
                 on_retract: Callable[[Retracted], None] | None = None) -> None:
        self.capacity = capacity
        self.max_running = max_running
        self._steps = steps              # the decode meter's per-request decode steps
        self.on_retract = on_retract
        self.queue: list[Seat] = []
        self.running: list[Seat] = []
        self._ratio_base = INIT_NEW_TOKEN_RATIO
        self._ratio_at = steps()
        self.frozen = False              # a stuck scheduler admits nothing

    # -- accounting -------------------------------------------------------------------------
    def new_token_ratio(self) -> float:
        decayed = self._ratio_base - NEW_TOKEN_RATIO_DECAY * (self._steps() - self._ratio_at)
        return max(MIN_NEW_TOKEN_RATIO, min(self._ratio_base, decayed))

    def used(self) -> int:
        steps = self._steps()
        return int(sum(s.prompt_tokens + s.tokens(steps) for s in self.running))

    def _reserved(self, seat: Seat, ratio: float, steps: float) -> float:
        left = min(max(0.0, seat.max_new_tokens - seat.tokens(steps)), CLIP_MAX_NEW_TOKENS)
        return left * (1.0 if seat.ignore_eos else ratio)

    def remaining(self) -> float:
        steps, ratio = self._steps(), self.new_token_ratio()
        return (self.capacity - self.used()
                - sum(self._reserved(s, ratio, steps) for s in self.running))

    def _need(self, seat: Seat) -> float:
        left = max(0, seat.max_new_tokens - int(seat.generated))
        return seat.prompt_tokens + int(seat.generated) + min(left, CLIP_MAX_NEW_TOKENS)

    # -- the queue --------------------------------------------------------------------------
    def enqueue(self, seat: Seat) -> None:
        seat.admitted = anyio.Event()
        self.queue.append(seat)
        self.admit()

    def leave(self, seat: Seat, steps: float | None = None) -> None:
        """The request is done (finished, aborted, or its client went away)."""
        if seat in self.queue:
            self.queue.remove(seat)
        if seat in self.running:
            self.stop_decoding(seat)
            self.running.remove(seat)
            seat.running = False
        self.admit()

    def admit(self) -> list[Seat]:
        """Admit from the head of the queue while each fits (and a slot is free)."""
        admitted: list[Seat] = []
        while not self.frozen and self.queue and len(self.running) < self.max_running:
            seat = self.queue[0]
            if self.running and not self._need(seat) < self.remaining():
                break
            self.queue.pop(0)
            seat.running = True
            seat.retracted = anyio.Event()
            self.running.append(seat)
            seat.admitted.set()
            admitted.append(seat)
        return admitted

    # -- decoding ---------------------------------------------------------------------------
    def start_decoding(self, seat: Seat) -> None:
        if seat._from_steps is None:
            seat._from_steps = self._steps()

    def stop_decoding(self, seat: Seat) -> None:
        if seat._from_steps is not None:
            seat.generated = seat.tokens(self._steps())
            seat._from_steps = None

    def set_generated(self, seat: Seat, tokens: float) -> None:
        """What the request has really sent (its stream's count), when it is known better
        than the meter's estimate."""
        self.stop_decoding(seat)
        seat.generated = min(float(seat.max_new_tokens), tokens)

    def check_decode(self) -> Retracted | None:
        """Before a decode step: retract when the step does not fit (schedule_batch.py
        check_decode_mem / retract_decode). Then admit whatever now fits."""
        result = None
        if self.running and self.used() + len(self.running) > self.capacity:
            result = self.retract()
        self.admit()
        return result

    def retract(self, at_least: int = 1, keep: int = 1) -> Retracted | None:
        """retract_decode: take out the least-preferred requests, at least `at_least`,
        until the next decode step fits, always keeping `keep` (SGLang keeps one; the
        forced "retract" fault may take a lone request out, to be readmitted at once)."""
        if len(self.running) <= keep:
            return None
        steps = self._steps()
        free_before = self.capacity - self.used()
        old_ratio = self.new_token_ratio()
        order = sorted(self.running, key=lambda s: (int(s.tokens(steps)), -s.prompt_tokens),
                       reverse=True)
        out: list[Seat] = []
        while len(order) > keep and (len(out) < at_least or self._kept_used(order, steps)
                                  + len(order) > self.capacity):
            out.append(order.pop())
        for seat in out:
            self.stop_decoding(seat)
            self.running.remove(seat)
            seat.running = False
            seat.retractions += 1
            seat.retracted.set()
        kept_out = sum(int(s.tokens(steps)) for s in self.running)
        kept_max = sum(s.max_new_tokens for s in self.running)
        self._ratio_base = min(1.0, (kept_out + RETRACT_DECODE_STEPS * len(self.running))
                               / (kept_max + 1))
        self._ratio_at = steps
        self.queue.extend(out)       # at the back, as _add_request_to_queue appends
        for seat in out:
            seat.admitted = anyio.Event()
        event = Retracted(
            reqs=len(out), input_tokens=sum(s.prompt_tokens for s in out),
            output_tokens=sum(int(s.generated) for s in out),
            tokens_gained=(self.capacity - self.used()) - free_before,
            old_ratio=old_ratio, new_ratio=self._ratio_base)
        if self.on_retract is not None:
            self.on_retract(event)
        return event

    @staticmethod
    def _kept_used(order: list[Seat], steps: float) -> float:
        return sum(s.prompt_tokens + s.tokens(steps) for s in order)
