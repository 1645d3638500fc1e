"""The length-aware ETA on a virtual clock: slots decoding answers of the simulator's lengths."""

from __future__ import annotations

import heapq

from supervisor.dispatch.length_eta import MIN_EVENTS, LengthEta
from supervisor.sim.output_plan import natural_length, prompt_digest

RATE = 50.0      # tokens/s per request


def _lengths(n: int) -> list[int]:
    return [natural_length(prompt_digest([{"role": "user", "content": f"q{i}"}], 0))
            for i in range(n)]


def _run(n: int, slots: int, cap: int, marks: tuple[float, ...], overhead: float = 0.0):
    """Runs the job; returns {mark: (time, estimate)} and the finish time."""
    lengths = [min(v, cap) for v in _lengths(n)]
    eta = LengthEta(clock=lambda: 0.0)
    heap: list[tuple[float, int]] = []
    nxt, done, t = 0, 0, 0.0
    seen: dict[float, tuple[float, object]] = {}

    def start(now: float) -> None:
        nonlocal nxt
        heapq.heappush(heap, (now + overhead + lengths[nxt] / RATE, nxt))
        eta.started(nxt, cap, now=now)
        nxt += 1

    for _ in range(slots):
        start(0.0)
    while heap:
        t, i = heapq.heappop(heap)
        eta.finished(i, lengths[i], lengths[i] >= cap, now=t)
        done += 1
        if nxt < n:
            start(t)
        for m in marks:
            if m not in seen and done >= m * n:
                seen[m] = (t, eta.estimate(n - nxt, cap, now=t))
    return seen, t


def test_no_estimate_until_enough_answers_finished():
    eta = LengthEta(clock=lambda: 0.0)
    for i in range(MIN_EVENTS - 1):
        eta.started(i, 4096, now=0.0)
        eta.finished(i, 1000, False, now=20.0)
    est = eta.estimate(100, 4096, now=20.0)
    assert est.eta_s is None and est.warming_up and "answers needed" in est.reason


def test_estimate_is_within_ten_percent_from_two_percent_of_the_job_on():
    seen, end = _run(n=6000, slots=24, cap=4096, marks=(0.02, 0.05, 0.1, 0.5))
    for mark, (t, est) in seen.items():
        actual = end - t
        assert abs(est.eta_s - actual) / actual < 0.10, (mark, est.eta_s, actual)
        assert est.low_s <= est.eta_s <= est.high_s
    # Half way, the longest answers are known and the mean is settled.
    t, est = seen[0.5]
    assert not est.warming_up and est.low_s <= end - t <= est.high_s
    assert abs(est.decode_tok_per_s - RATE) < 1e-6


def test_raising_max_tokens_reopens_the_tail_and_says_so():
    eta = LengthEta(clock=lambda: 0.0)
    lengths = _lengths(400)
    for i, v in enumerate(lengths):
        eta.started(i, 2048, now=0.0)
        eta.finished(i, min(v, 2048), v > 2048, now=min(v, 2048) / RATE)
    eta.started("x", 8192, now=100.0)
    same = eta.estimate(1000, 2048, now=101.0)
    raised = eta.estimate(1000, 8192, now=101.0)
    assert not same.warming_up
    assert raised.warming_up and "longest answers not seen" in raised.reason
    assert raised.expected_tokens > same.expected_tokens
    assert raised.high_s - raised.low_s > 3 * (same.high_s - same.low_s)


def test_requeued_prompts_are_expected_to_run_past_their_old_limit():
    eta = LengthEta(clock=lambda: 0.0)
    for i, v in enumerate(_lengths(2000)):
        eta.started(i, 16384, now=0.0)
        eta.finished(i, v, v > 16384, now=v / RATE)
    eta.started("running", 16384, now=0.0)
    fresh = eta.estimate(100, 16384, now=1.0)
    requeued = eta.estimate(100, 16384, now=1.0, pending_floors={4096: 100})
    assert requeued.remaining_tokens > 2 * fresh.remaining_tokens
    assert requeued.remaining_tokens > 100 * 4096


def test_no_requests_in_flight_means_no_eta():
    eta = LengthEta(clock=lambda: 0.0)
    for i in range(100):
        eta.started(i, 4096, now=0.0)
        eta.finished(i, 500 + i, False, now=10.0 + i / 10)
    est = eta.estimate(50, 4096, now=30.0)
    assert est.eta_s is None and est.reason == "nothing in flight"
    assert est.expected_tokens is not None and est.tok_per_s == 0.0


def test_the_end_of_the_job_waits_for_its_longest_answer():
    # Past the last pending prompt the slots empty one by one: the ETA is the longest
    # answer still running, not the average one.
    seen, end = _run(n=3000, slots=24, cap=4096, marks=(0.9, 0.97, 0.99))
    for mark, (t, est) in seen.items():
        actual = end - t
        assert abs(est.eta_s - actual) / actual < 0.10, (mark, est.eta_s, actual)


def test_a_fixed_cost_per_request_is_not_taken_for_slow_decoding():
    # Queueing, prefill and HTTP cost every request the same; the short first answers of a
    # job pay it as much as the long ones. Fitted apart, the decode rate stays the real one.
    seen, end = _run(n=4000, slots=24, cap=4096, marks=(0.02, 0.1, 0.5), overhead=8.0)
    for mark, (t, est) in seen.items():
        actual = end - t
        assert abs(est.eta_s - actual) / actual < 0.10, (mark, est.eta_s, actual)
        assert abs(est.decode_tok_per_s - RATE) / RATE < 0.01


def test_a_moment_with_fewer_requests_in_flight_is_averaged_out():
    now = [0.0]
    eta = LengthEta(busy_window_s=30.0, clock=lambda: now[0])
    for i in range(10):
        eta.started(i, 4096, now=0.0)
    for t in range(0, 30):
        now[0] = float(t)
        assert eta.busy_slots(now[0]) == 10.0
    for i in range(5):                     # half the slots empty for one second
        eta.dropped(i)
    now[0] = 31.0
    assert 9.5 < eta.busy_slots(31.0) < 10.0
    now[0] = 70.0                          # ...and for good: the average follows
    assert eta.busy_slots(70.0) == 5.0


def test_unsteady_throughput_widens_the_interval():
    def width(counts: list[int]) -> float:
        eta = LengthEta(busy_window_s=1.0, clock=lambda: 0.0)
        for i, v in enumerate(_lengths(300)):
            eta.started(("done", i), 4096, now=0.0)
            eta.finished(("done", i), min(v, 4096), v > 4096, now=min(v, 4096) / RATE)
        t = 100.0
        for k, n in enumerate(counts):
            for j in range(40):
                eta.dropped((k - 1, j))
            for j in range(n):
                eta.started((k, j), 4096, now=t)
            t += 5.0
            est = eta.estimate(10_000, 4096, now=t)
        return (est.high_s - est.low_s) / est.eta_s

    steady = width([30] * 20)
    unsteady = width([20, 40] * 10)
    assert unsteady > 2 * steady


def test_a_drifting_decode_rate_widens_the_interval():
    def width(rate_of) -> float:
        eta = LengthEta(clock=lambda: 0.0)
        for i, v in enumerate(_lengths(512)):
            eta.started(i, 4096, now=0.0)
            n = min(v, 4096)
            eta.finished(i, n, v > 4096, now=n / rate_of(i))
        eta.started("x", 4096, now=0.0)
        est = eta.estimate(10_000, 4096, now=1.0)
        return (est.high_s - est.low_s) / est.eta_s

    steady = width(lambda i: RATE)
    drifting = width(lambda i: RATE * (0.8 if (i // 64) % 2 else 1.2))   # blocks of 64
    assert drifting > 2 * steady
