from supervisor.client.text import duration
from supervisor.dispatch.rate_window import CompletionRateWindow, eta_seconds


def test_rates_cover_only_the_window_and_warm_up():
    w = CompletionRateWindow(window_s=10, started_at=1000.0)
    for t in range(1000, 1005):          # 5 s at 2 completions/s, 100 tokens each
        w.add(t + 0.5, 2, 200)
    early = w.snapshot(1005.0)
    assert early.warming_up and early.span_s == 5.0
    assert early.req_per_s == 2.0 and early.tok_per_s == 200.0 and early.avg_output_tokens == 100
    for t in range(1005, 1030):          # then 25 s at 1/s
        w.add(t + 0.5, 1, 50)
    late = w.snapshot(1030.0)
    assert not late.warming_up and late.span_s == 10.0
    assert late.req_per_s == 1.0 and late.avg_output_tokens == 50   # the fast start is gone


def test_a_stall_shows_as_zero_not_an_average():
    w = CompletionRateWindow(window_s=10, started_at=0.0)
    for t in range(20):
        w.add(float(t), 5, 5)
    assert w.snapshot(20.0).req_per_s == 5.0
    assert w.snapshot(60.0).req_per_s == 0.0


def test_eta_and_formatting():
    assert eta_seconds(100, 2.0) == 50.0
    assert eta_seconds(100, 0.0) is None
    assert eta_seconds(0, 0.0) == 0.0
    assert duration(None) == "--"
    assert duration(59) == "59s"
    assert duration(125) == "2m05s"
    assert duration(26.7 * 3600) == "26h42m"
