"""The stop report's arithmetic: discarded tokens are each cut request's age times its
server's per-request decode rate, capped at its max tokens."""

from __future__ import annotations

from supervisor.dispatch.dispatch_snapshot import InFlightRequest
from supervisor.job.graceful_stop import StopReport, estimate_discarded_tokens


def test_tokens_share_the_server_rate_between_its_requests():
    cut = [InFlightRequest("gpu0", started=90.0, max_tokens=8192),
           InFlightRequest("gpu0", started=95.0, max_tokens=8192),
           InFlightRequest("gpu1", started=99.0, max_tokens=8192)]
    # gpu0: 1000 tok/s over 2 requests = 500 each: 10 s and 5 s; gpu1: 300 tok/s for 1 s.
    assert estimate_discarded_tokens(cut, 100.0, {"gpu0": 1000.0, "gpu1": 300.0}) == 7800


def test_a_request_never_counts_more_than_its_max_tokens_nor_an_unknown_server_anything():
    cut = [InFlightRequest("gpu0", started=0.0, max_tokens=256),
           InFlightRequest("gpu9", started=0.0, max_tokens=256)]
    assert estimate_discarded_tokens(cut, 1000.0, {"gpu0": 1000.0}) == 256
    assert estimate_discarded_tokens([], 1000.0, {}) == 0


def test_report_line_and_detail():
    r = StopReport(grace_s=120, waited_s=31.4, finished_in_grace=52, requeued=12,
                   discarded_tokens=18000, cut_short="second SIGTERM")
    assert r.line() == ("52 requests finished in the grace (31 s of 120 s), 12 requeued, "
                        "~18000 generated tokens discarded (cut short: second SIGTERM)")
    assert r.as_detail()["finished_in_grace"] == 52 and r.as_detail()["waited_s"] == 31.4
