"""The circuit breaker's window, threshold and pause reason."""

from __future__ import annotations

from supervisor.dispatch.error_breaker import SAMPLE_CHARS, ErrorBreaker

LORA = "HTTP 400: LoRA adapter 'v2' was requested, but LoRA is not enabled."


def test_waits_for_min_samples_then_opens_naming_the_error():
    b = ErrorBreaker(window=200, min_samples=5, max_error_rate=0.5)
    assert [b.observe_error("HTTP 400", LORA) for _ in range(4)] == [None] * 4
    assert not b.open
    reason = b.observe_error("HTTP 400", LORA)
    assert reason == f"100% of the last 5 requests failed (threshold 50%): {LORA}"
    assert b.open and b.trip is not None
    assert (b.trip.kind, b.trip.sample, b.trip.counts) == ("HTTP 400", LORA, {"HTTP 400": 5})
    # Open, it says so once: later errors do not reopen it.
    assert b.observe_error("HTTP 400", LORA) is None and b.open
    snap = b.snapshot()
    assert snap.tripped == reason and snap.tripped_kind == "HTTP 400"
    assert snap.samples == 6 and snap.error_rate == 1.0 and snap.errors_total == 6


def test_a_share_at_the_threshold_does_not_open_and_the_window_slides():
    b = ErrorBreaker(window=4, min_samples=4, max_error_rate=0.5)
    for _ in range(2):
        b.observe_ok()
    assert b.observe_error("HTTP 500", "HTTP 500: boom") is None
    assert b.observe_error("HTTP 500", "HTTP 500: boom") is None      # 2 of 4: not above
    assert b.snapshot().error_rate == 0.5
    # The oldest answer (a success) leaves the window: 3 of 4 fail.
    reason = b.observe_error("HTTP 500", "HTTP 500: boom")
    assert reason is not None and reason.startswith("75% of the last 4 requests failed")
    assert b.snapshot().samples == 4


def test_the_most_common_error_is_named_and_the_others_listed():
    b = ErrorBreaker(window=10, min_samples=10, max_error_rate=0.5)
    for i in range(6):
        b.observe_error("HTTP 503", f"HTTP 503: overloaded {i}")
    for _ in range(3):
        b.observe_error("timeout", "no answer within 3600 s (ReadTimeout)")
    reason = b.observe_ok() or b.observe_error("HTTP 503", "HTTP 503: overloaded 9")
    # The newest message of the commonest kind is the sample.
    assert reason is not None and ": HTTP 503: overloaded 9 (also timeout ×3)" in reason
    assert b.snapshot().errors_by_kind == {"HTTP 503": 6, "timeout": 3}


def test_a_long_message_is_cut_in_the_reason_but_kept_whole_in_the_trip():
    b = ErrorBreaker(window=2, min_samples=1, max_error_rate=0.5)
    long = "HTTP 400: " + "x" * 2000
    reason = b.observe_error("HTTP 400", long)
    assert reason is not None and reason.endswith("…")
    assert len(reason) < SAMPLE_CHARS + 80 and b.trip is not None and b.trip.sample == long


def test_reset_closes_and_forgets_the_window_but_keeps_the_totals():
    b = ErrorBreaker(window=10, min_samples=2, max_error_rate=0.5)
    b.observe_error("HTTP 400", LORA)
    assert b.observe_error("HTTP 400", LORA) is not None
    b.reset()
    snap = b.snapshot()
    assert not b.open and snap.tripped is None and snap.samples == 0
    assert snap.last_error is None and (snap.requests_total, snap.errors_total) == (2, 2)
    # It can open again, on a fresh window.
    b.observe_ok()
    assert b.observe_error("HTTP 400", LORA) is None        # 1 of 2 is not above 50%
    assert b.observe_error("HTTP 400", LORA) is not None


def test_a_rate_of_one_never_opens():
    b = ErrorBreaker(window=5, min_samples=1, max_error_rate=1.0)
    assert all(b.observe_error("HTTP 500", "HTTP 500: x") is None for _ in range(20))
    assert not b.open and b.snapshot().samples == 5


def test_a_smaller_window_after_a_reload_drops_the_oldest():
    b = ErrorBreaker(window=10, min_samples=10, max_error_rate=0.9)
    for _ in range(8):
        b.observe_ok()
    b.window, b.min_samples = 3, 3
    assert b.observe_error("HTTP 500", "HTTP 500: x") is None     # ok, ok, error
    b.observe_error("HTTP 500", "HTTP 500: x")
    assert b.snapshot().samples == 3
    assert b.observe_error("HTTP 500", "HTTP 500: x") is not None  # three errors of three


def test_errors_from_one_server_while_the_others_answer_name_that_server():
    b = ErrorBreaker(window=20, min_samples=10, max_error_rate=0.5)
    for _ in range(3):
        b.observe_ok("gpu0")
        b.observe_ok("gpu1")
    reasons = [b.observe_error("HTTP 500", "HTTP 500: Internal server error", "gpu2")
               for _ in range(7)]
    reason = reasons[-1]
    assert reasons[:-1] == [None] * 6 and reason is not None
    assert reason.startswith("54% of the last 13 requests failed on gpu2 "
                             "(the other servers answer) (threshold 50%): HTTP 500")
    assert b.trip is not None and b.trip.servers == {"gpu2": 7}
    assert b.snapshot().errors_by_server == {"gpu2": 7}


def test_errors_on_every_server_name_none():
    # A bad setting fails every server alike: the reason points at the error, not a server.
    b = ErrorBreaker(window=20, min_samples=4, max_error_rate=0.5)
    for server in ("gpu0", "gpu1", "gpu0", "gpu1"):
        reason = b.observe_error("HTTP 400", LORA, server)
    assert reason == f"100% of the last 4 requests failed (threshold 50%): {LORA}"
    assert b.trip is not None and b.trip.servers == {"gpu0": 2, "gpu1": 2}
