"""How figures, flags, events and the histogram are turned into text (pure functions)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from supervisor.client.text import duration
from supervisor.contract.status import Event, Histogram, ServerState
from supervisor.dispatch.event_fold import EventFold
from tests.fixtures import tui_status_data as data
from tui.alerts import Severity, alerts
from tui.event_text import describe, line, who
from tui.flag_text import FlagSyntaxError, parse_flags, show_value
from tui.formatting import ago, count, gib, one_line, percent, size
from tui.link_state import LinkState
from tui.widgets.job.length_histogram import columns
from tui.widgets.servers.server_table import gpu_cells

LIVE = LinkState(connected=True)


@pytest.mark.parametrize("seconds,text", [
    (None, "?"), (-1, "?"), (float("nan"), "?"), (0, "0s"), (59.4, "59s"), (60, "1m00s"),
    (3599, "59m59s"), (3600, "1h00m"), (77_525, "21h32m"), (90_000, "25h00m"),
    (26.7 * 3600, "26h42m"), (172_800, "2d00h"), (280_000, "3d05h")])
def test_duration(seconds: float | None, text: str) -> None:
    # One format for the TUI, `status` and the daemon's progress line; each says how it
    # shows an unknown span.
    assert duration(seconds, "?") == text
    assert duration(seconds) == text.replace("?", "--")


def test_figures() -> None:
    assert [count(x) for x in (987, 9999, 12_345, 2_500_000, 9.44)] == \
        ["987", "9999", "12.3k", "2.50M", "9.4"]
    assert size(23_400_000) == "23.4 MB" and size(512) == "512 B" and size(None) == "n/a"
    assert gib(80 * 2**30) == "80" and gib(None) == "n/a"
    assert percent(0.175) == "17.5%" and percent(None) == "n/a"
    assert ago(None, 10.0) == "never" and ago(58.0, 100.0) == "42s ago"
    assert one_line("a\n  b\tc") == "a b c" and one_line("x" * 50, 10) == "x" * 9 + "…"


def test_flags_parse_as_typed_in_the_dialog() -> None:
    assert parse_flags("--max-running-requests=48 mem-fraction-static=0.85 "
                       "enable-metrics=true disable-radix-cache=false "
                       "reasoning-parser=qwen3 cuda-graph-max-bs=") == {
        "max-running-requests": 48, "mem-fraction-static": 0.85, "enable-metrics": True,
        "disable-radix-cache": False, "reasoning-parser": "qwen3", "cuda-graph-max-bs": None}
    assert parse_flags("cuda-graph-bs='1 2 4 8'") == {"cuda-graph-bs": (1, 2, 4, 8)}
    for bad, why in [("", "no flags"), ("x", "expected name=value"), ("=3", "expected"),
                     ("a=1 a=2", "given twice"), ("a='unclosed", "cannot split")]:
        with pytest.raises(FlagSyntaxError, match=why):
            parse_flags(bad)
    assert [show_value(v) for v in (None, True, False, 64, 0.93, (1, 2, 4))] == \
        ["(removed)", "(switch)", "false", "64", "0.93", "1 2 4"]


def ev(kind: str, subject: str, detail: dict, **kw: object) -> Event:
    return Event(id=1, time=data.T0, kind=kind, subject=subject, actor="supervisor",
                 detail_json=json.dumps(detail), **kw)  # type: ignore[arg-type]


def test_events_read_as_sentences() -> None:
    assert describe(data.EVENTS[1]) == "gpu3 READY → BACKOFF: oom: CUDA out of memory"
    assert describe(data.EVENTS[4]) == "max tokens 2048 → 4096"
    assert who(data.EVENTS[4]) == "alice (pid 52311)"
    assert who(data.EVENTS[0]) == "supervisor"
    assert describe(ev("server_retune", "*", {"flags": {"max-running-requests": 48}})) == \
        "retune all servers: --max-running-requests 48"
    assert describe(ev("uploads_stopped", "uploads", {"reason": "NoSuchBucket"})) == \
        "UPLOADS STOPPED: NoSuchBucket"
    assert describe(ev("control_action", "pause", {"request": {"reason": "checking"},
                                                   "result": {"changed": True}})) == \
        'asked: pause reason="checking"'
    # A kind this version does not know still says what it is, never a traceback.
    assert describe(ev("new_kind", "job", {"a": 1})) == 'new_kind job {"a": 1}'
    assert describe(replace(ev("paused", "quality", {}), detail_json="not json")) == \
        "paused (quality): "
    assert line(data.EVENTS[5]).endswith("— alice (pid 52311)")


def _folded(kind: str, details: list[dict]) -> tuple[dict, dict]:
    """The row written at once and the summary, as the daemon's fold writes them."""
    async def write(*_: object) -> None:
        return None
    fold = EventFold(write, window_s=30.0)
    first = fold.admit(kind, "gpu2", details[0], "supervisor", 0.0)
    for i, d in enumerate(details[1:], 1):
        assert fold.admit(kind, "gpu2", d, "supervisor", float(i)) is None
    (summary,) = fold.due(30.0)
    assert first is not None
    return first, summary.detail


def test_folded_loops_and_stalls_read_as_one_sentence() -> None:
    loops = [{"prompt": f"p{i}", "rid": f"p{i}#1#ab", "part": part, "tokens": 1000,
              "saved": 15_000, "snippet": "wait, wait,"}
             for i, part in enumerate(["reasoning"] * 6 + ["content"] * 2)]
    first, summary = _folded("loop_aborted", loops)
    assert describe(ev("loop_aborted", "gpu2", first)) == \
        "gpu2 stopped a loop in reasoning of p0 at 1000 tokens (saved 15000): 'wait, wait,'"
    assert describe(ev("loop_aborted", "gpu2", summary)) == \
        ("gpu2 stopped 7 loops in 30s (saved 105.0k tokens; answer 2, thinking 5), "
         "e.g. p1, p2, p3, p4, p5 …")
    stalls = [{"prompt": f"s{i}", "rid": f"s{i}#1#cd", "tokens": 40, "stall_s": 120.0}
              for i in range(3)]
    first, summary = _folded("request_stalled", stalls)
    assert describe(ev("request_stalled", "gpu2", first)) == \
        "gpu2 aborted s0: no token for 120.0 s after 40 tokens; retried"
    assert describe(ev("request_stalled", "gpu2", summary)) == \
        "gpu2 aborted 2 stalled requests in 30s: no token for 120.0 s (80 tokens lost); " \
        "retried, e.g. s1, s2"
    # One part only: no split to show; a summary of one is singular.
    _, one = _folded("loop_aborted", loops[:2])
    assert describe(ev("loop_aborted", "gpu2", one)) == \
        "gpu2 stopped 1 loop in 30s (saved 15.0k tokens), e.g. p1"


def test_a_pause_that_names_its_source_is_not_said_twice() -> None:
    """`PAUSED by operator`, not `PAUSED (operator): paused by operator`; other reasons keep
    their source in brackets."""
    from dataclasses import replace

    from supervisor.contract.status import PauseReason

    s = data.healthy()
    by_operator = replace(s, paused=(PauseReason("operator", "paused by operator"),))
    assert [a.text for a in alerts(by_operator, LIVE)] == ["PAUSED by operator"]
    looking = replace(s, paused=(PauseReason("operator", "checking shard 42"),))
    assert [a.text for a in alerts(looking, LIVE)] == ["PAUSED (operator): checking shard 42"]


def test_alerts_name_every_reason_to_look() -> None:
    assert alerts(data.healthy(), LIVE) == ()
    assert alerts(None, LinkState.connecting()) == ()
    texts = [a.text for a in alerts(data.paused_by_quality(), LIVE)]
    assert texts == ["PAUSED (quality): bad output: 62% of the last 200 completions "
                     "(threshold 50%): empty_content 118, think_markers 6"]
    failed = alerts(data.with_failed_server(), LIVE)
    assert [(a.severity, a.text.split(":")[0]) for a in failed] == \
        [(Severity.ERROR, "SERVER gpu5 FAILED")]
    assert alerts(data.uploads_stopped(), LIVE)[0].text.startswith(
        "UPLOADS STOPPED: bucket dflash-data does not exist")
    down = LinkState(connected=False, reason="no daemon answers on /x: Connection refused",
                     attempts=4, ever_connected=True)
    first = alerts(data.healthy(), down)[0]
    assert first.severity is Severity.ERROR
    assert first.text.startswith("DISCONNECTED — retrying, attempt 4: no daemon answers")
    assert "last ones received" in first.text
    # A daemon that said it was stopping (its job_stopped event came through) says why.
    stopped = data.EVENTS + (ev("job_stopped", "job", {"reason": "finished"}),)
    assert alerts(data.healthy(), down, stopped)[0].text.startswith(
        "DISCONNECTED — the daemon stopped (finished); retrying, attempt 4")
    assert alerts(data.healthy(), down, stopped + (ev("job_started", "job", {}),))[0] == first
    # Never connected yet: waiting, not "disconnected".
    waiting = alerts(None, LinkState(connected=False, reason="No such file or directory",
                                     attempts=2))
    assert [(a.severity, a.text) for a in waiting] == [
        (Severity.WARNING, "WAITING for the daemon, attempt 2: No such file or directory")]


def test_the_breakers_pause_is_an_error_naming_the_share_and_sglangs_message() -> None:
    [alert] = alerts(data.paused_by_breaker(), LIVE)
    assert alert.severity is Severity.ERROR
    assert alert.text.startswith("PAUSED (breaker), REQUESTS FAILING: 97% of the last 200 "
                                 "requests failed (threshold 50%): HTTP 400: LoRA adapter 'v2'")
    assert alert.text.endswith("(fix, then p to resume)")


def test_histogram_columns_keep_every_completion_and_mark_the_limit() -> None:
    h = data.histogram()
    for width in (20, 37, 48, 100):
        values, top, marker = columns(h, width)
        assert len(values) == width
        assert sum(values) == pytest.approx(h.samples)
        assert top >= h.max_tokens
        # The marker column holds the last token counts below the limit.
        assert marker * top / width <= h.max_tokens - 1 < (marker + 1) * top / width
    # Lengths that sit exactly at one edge (a zero-width bucket) are not lost.
    point = Histogram(edges=(0, 4096, 4096), counts=(10, 5), samples=15, max_tokens=4096)
    values, _, marker = columns(point, 30)
    assert sum(values) == pytest.approx(15)
    # After max tokens is raised past the data, the marker moves right of all the bars.
    raised = replace(h, max_tokens=8192)
    values, top, marker = columns(raised, 50)
    assert top >= 8192 and max(i for i, v in enumerate(values) if v) < marker


def test_gpu_cells_sum_a_tensor_parallel_server_and_say_na() -> None:
    s = data.healthy()
    gpus = {g.index: g for g in s.gpus.gpus}

    def cells(server, by_index) -> tuple[str, ...]:
        return tuple(str(c) for c in gpu_cells(server, by_index))

    assert cells(s.servers[1], gpus) == ("571/700", "95%", "62", "75/80")
    tp = replace(s.servers[0], gpus=(0, 1))
    # Power and memory add up; the temperature is the hottest GPU's.
    assert cells(tp, gpus) == ("1131/1400", "96%", "62", "149/160")
    assert cells(s.servers[0], {}) == ("n/a", "n/a", "n/a", "n/a")
    no_power = {0: replace(gpus[0], power_w=None, power_limit_w=None, temperature_c=None)}
    assert cells(s.servers[0], no_power) == ("n/a", "96%", "n/a", "74/80")
    hot = {0: replace(gpus[0], temperature_c=88.0)}
    temp = gpu_cells(s.servers[0], hot)[2]
    assert str(temp) == "88" and "red" in str(temp.style)
    assert ServerState.FAILED.value == "FAILED"


def test_bars_start_at_zero_and_keep_the_newest_on_the_right() -> None:
    from tui.bar_chart import bar_rows, bucket_means
    assert bar_rows([0, 4, 8], 1) == [" ▄█"]
    # A dip from 9.4 to 9.0 stays a small dip (scaled from zero, not from the minimum).
    assert bar_rows([9.4, 9.0], 1) == ["██"]
    assert bar_rows([1, 2], 2, peak=2) == [" █", "██"]
    assert bucket_means([1, 2, 3], 5) == [1, 2, 3]
    assert bucket_means([1, 1, 3, 3, 5, 5], 3) == [1, 3, 5]
