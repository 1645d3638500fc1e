"""The simulator's KV pool against SGLang 0.5.23's scheduler rules (supervisor/sim/kv_pool.py),
driven by a hand-moved decode step count instead of time."""

from __future__ import annotations

import pytest

from supervisor.sim.kv_pool import (
    CLIP_MAX_NEW_TOKENS,
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO,
    KVPool,
    Retracted,
    Seat,
)


class Steps:
    """The decode meter's per-request step count, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pool(capacity: int, max_running: int = 100) -> tuple[KVPool, Steps, list[Retracted]]:
    steps, events = Steps(), []
    return KVPool(capacity, max_running, steps, events.append), steps, events


def _decode_all(pool: KVPool) -> None:
    for seat in pool.running:
        pool.start_decoding(seat)


def test_admits_while_prompt_and_clipped_budget_fit_then_queues_fcfs():
    """schedule_policy.py:1395 add_one_req: input + min(max_new, 4096) must be below what is
    left (prefill_budget.py:128, strictly); the running ones leave their remaining budget
    times new_token_ratio (0.7 at start, :787). The queue stops at the first that does not
    fit (NO_TOKEN), even if a later one would."""
    pool, _, _ = _pool(1000)
    a, b, c, small = Seat(100, 400), Seat(100, 400), Seat(100, 400), Seat(1, 1)
    for seat in (a, b, c, small):
        pool.enqueue(seat)
    # a: 500 < 1000. b: 1000 - 100 - 0.7 * 400 = 620 > 500. c: 620 - 100 - 280 = 240 < 500.
    assert pool.running == [a, b] and pool.queue == [c, small]
    assert pool.remaining() == pytest.approx(1000 - 200 - 2 * 0.7 * 400)


def test_the_budget_is_clipped_at_4096_for_the_estimate():
    """CLIP_MAX_NEW_TOKENS (schedule_policy.py:89): a 30,000-token budget is estimated as
    4,096."""
    pool, _, _ = _pool(10_000)
    first, second = Seat(10, 30_000), Seat(10, 30_000)
    pool.enqueue(first)
    pool.enqueue(second)
    assert pool.running == [first, second]
    assert pool.remaining() == pytest.approx(10_000 - 20 - 2 * 0.7 * CLIP_MAX_NEW_TOKENS)


def test_ignore_eos_reserves_its_whole_budget_so_it_queues_and_is_never_retracted():
    """An ignore_eos request counts at ratio 1.0 (schedule_policy.py:787, 1260): it cannot
    end early, so the scheduler never over-commits for it; a batch of them fills the pool
    exactly as admitted and the next decode step always fits."""
    pool, steps, events = _pool(1000)
    seats = [Seat(100, 300, ignore_eos=True) for _ in range(4)]
    for seat in seats:
        pool.enqueue(seat)
    # 400 < 1000; then 1000 - 400 = 600 > 400; then 600 - 400 = 200 < 400: two run.
    assert pool.running == seats[:2] and pool.queue == seats[2:]
    _decode_all(pool)
    for _ in range(300):
        steps.now += 1
        assert pool.check_decode() is None
    assert events == []


def test_the_new_token_ratio_decays_per_decode_step_to_its_floor():
    """new_token_ratio_tracker.py: 0.7, minus (0.7 - 0.098) / 600 a decode step, floor 0.098
    (environ.py:646-648): the scheduler admits more the longer nothing is retracted."""
    pool, steps, _ = _pool(1000)
    assert pool.new_token_ratio() == pytest.approx(INIT_NEW_TOKEN_RATIO)
    steps.now = 300
    assert pool.new_token_ratio() == pytest.approx((0.7 + 0.098) / 2)
    steps.now = 10_000
    assert pool.new_token_ratio() == pytest.approx(MIN_NEW_TOKEN_RATIO)


def _overcommitted() -> tuple[KVPool, Steps, list[Retracted], list[Seat]]:
    """Four requests of 10 + 300 tokens admitted into 1,000 (each reserving 0.7 x 300 of
    what it may write), a fifth queued; all four decode."""
    pool, steps, events = _pool(1000)
    seats = [Seat(10, 300) for _ in range(5)]
    for seat in seats:
        pool.enqueue(seat)
    assert pool.running == seats[:4] and pool.queue == seats[4:]
    _decode_all(pool)
    return pool, steps, events, seats


def test_when_the_running_outgrow_the_pool_the_newest_are_retracted_keeping_their_tokens():
    """schedule_batch.py:3451 retract_decode: when the next step (one token per request)
    does not fit, requests are taken out fewest-output-tokens first (:3542; ties: the
    newest), at least one, until the rest fit, one always kept; they go to the back of the
    queue (scheduler.py:3480) with their output tokens kept; the ratio is reset to (decoded
    + 20 per request) / (max new + 1) over those kept (new_token_ratio_tracker.py)."""
    pool, steps, events, seats = _overcommitted()
    steps.now = 239                       # 4 x 249 + 4 = 1000: the next step still fits
    assert pool.check_decode() is None
    steps.now = 240                       # 4 x 250 + 4 > 1000
    event = pool.check_decode()
    assert event is not None and event.reqs == 1
    assert pool.running == seats[:3] and pool.queue == [seats[4], seats[3]]
    assert seats[3].retracted.is_set() and seats[3].generated == pytest.approx(240)
    assert (event.input_tokens, event.output_tokens) == (10, 240)
    assert event.new_ratio == pytest.approx((3 * 240 + 20 * 3) / (3 * 300 + 1))
    assert events == [event]


def test_one_request_is_always_kept():
    """retract_decode never empties the batch (it aborts the last one instead)."""
    pool, steps, _ = _pool(500)
    seat = Seat(100, 1000)
    pool.enqueue(seat)
    pool.start_decoding(seat)
    steps.now = 450
    assert pool.check_decode() is None and pool.running == [seat]


def test_a_retracted_request_resumes_with_its_output_reprefilled():
    """A retracted request keeps output_ids (reset_for_retract): admitted again, its input
    is its prompt and what it had written, and it goes on from there."""
    pool, steps, _, seats = _overcommitted()
    steps.now = 240
    pool.check_decode()
    retracted = seats[3]
    for seat in seats[:3]:
        pool.leave(seat)                   # the others finish: the queue runs again
    assert retracted.running and retracted.admitted.is_set()
    pool.start_decoding(retracted)
    steps.now = 250
    assert retracted.tokens(steps.now) == pytest.approx(250)
    assert pool.used() == (10 + 250) + 10     # it, and the fifth (admitted, not decoding yet)


def test_a_lone_request_is_admitted_even_when_its_budget_is_bigger_than_the_pool():
    """The simulator's own rule (kv_pool.py): nothing running, the head is admitted, so a
    test with a tiny pool cannot wedge."""
    pool, _, _ = _pool(100)
    seat = Seat(10, 5000)
    pool.enqueue(seat)
    assert pool.running == [seat]


def test_max_running_caps_the_batch_whatever_the_pool():
    pool, _, _ = _pool(1_000_000, max_running=2)
    seats = [Seat(10, 10) for _ in range(3)]
    for seat in seats:
        pool.enqueue(seat)
    assert pool.running == seats[:2] and pool.queue == seats[2:]


def test_a_frozen_scheduler_admits_nothing():
    pool, _, _ = _pool(1000)
    pool.frozen = True
    seat = Seat(10, 10)
    pool.enqueue(seat)
    assert pool.queue == [seat]
    pool.frozen = False
    pool.admit()
    assert pool.running == [seat]
