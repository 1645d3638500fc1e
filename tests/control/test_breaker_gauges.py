"""The circuit breaker and truncation split by where the cut fell, through every reader of
the status: the contract's JSON round trip, /metrics (read back with prometheus_client's
own parser) and `status`'s text."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from supervisor.client.text import progress_line, report, truncation
from supervisor.contract import status as c
from supervisor.control.metrics import RestartCauses, render
from tests.fixtures import status_samples as samples

LORA = ("HTTP 400: LoRA adapter 'v2' was requested, but LoRA is not enabled. Please launch "
        "the server with --enable-lora flag and preload adapters using --lora-paths or "
        "/load_lora_adapter endpoint.")
REASON = f"97% of the last 200 requests failed (threshold 50%): {LORA}"


def _tripped() -> c.Status:
    s = samples.status(servers=2)
    breaker = c.Breaker(window=200, samples=200, error_rate=0.97, threshold=0.5,
                        errors=(c.ErrorCount("HTTP 400", 190), c.ErrorCount("timeout", 4)),
                        requests_total=9_000, errors_total=220, tripped=REASON,
                        tripped_error="HTTP 400", sample=LORA, last_error=LORA)
    quality = replace(s.quality, truncation_rate=0.3, thinking_truncated_rate=0.25,
                      answer_truncated_rate=0.05, thinking_truncated_total=3_000,
                      max_thinking_truncated_rate=0.5)
    return replace(s, breaker=breaker, quality=quality,
                   paused=(c.PauseReason("breaker", REASON),))


def _own(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in ("job", "partition")}


def _metrics(status: c.Status) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = render(status, (0, 0), RestartCauses(), {}).decode()
    # job and partition are on every series (tests/control/test_series_labels.py).
    return {s.name: [(_own(x.labels), x.value) for x in f.samples if x.name == s.name]
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_breaker_and_the_split_survive_the_json_round_trip() -> None:
    status = _tripped()
    assert c.Status.from_json(status.to_json()) == status
    # An older daemon's snapshot (no breaker, no split) still reads.
    assert c.Status.from_json(samples.status(servers=1).to_json()).breaker is None


def test_metrics_say_the_breaker_is_open_with_its_errors_by_kind() -> None:
    got = _metrics(_tripped())
    assert got["dflash_breaker_open"] == [({}, 1.0)]
    assert got["dflash_breaker_error_ratio"] == [({}, 0.97)]
    assert sorted(got["dflash_breaker_window_errors"], key=lambda x: x[0]["kind"]) == \
        [({"kind": "HTTP 400"}, 190.0), ({"kind": "timeout"}, 4.0)]
    assert ({"source": "breaker"}, 1.0) in got["dflash_paused"]
    assert got["dflash_truncation_thinking_ratio"] == [({}, 0.25)]
    assert got["dflash_truncation_answer_ratio"] == [({}, 0.05)]
    shut = _metrics(replace(_tripped(), paused=(),
                            breaker=replace(_tripped().breaker, tripped=None)))  # type: ignore[arg-type]
    assert shut["dflash_breaker_open"] == [({}, 0.0)]


def test_metrics_leave_out_what_an_older_daemon_did_not_give() -> None:
    got = _metrics(samples.status(servers=1))
    assert "dflash_breaker_open" not in got and "dflash_truncation_thinking_ratio" not in got


def test_status_text_splits_truncation_and_names_the_errors() -> None:
    status = _tripped()
    line = progress_line(status)
    assert "trunc 30.0% (in thinking 25.0%, in answer 5.0%; long 0.0%, loop 4.0%)" in line
    text = report(status, "/run/x.sock")
    assert f"PAUSED   (breaker) {REASON}" in text
    assert ("errors   97% of the last 200 requests (pauses above 50%): HTTP 400 190, "
            "timeout 4; latest: HTTP 400: LoRA adapter") in text


def test_truncation_text_shows_each_split_only_when_there_is_one() -> None:
    assert truncation(0.18) == "trunc 18.0%"
    assert truncation(0.18, 0.0, 0.18, None, None) == "trunc 18.0%"
    assert truncation(0.18, 0.1, 0.08) == "trunc 18.0% (in thinking 10.0%, in answer 8.0%)"
    assert truncation(0.18, None, None, 0.12, 0.06) == "trunc 18.0% (long 12.0%, loop 6.0%)"
