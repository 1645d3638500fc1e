"""The waste ledger and the saturation guard's limit in the status contract (JSON round
trip, an older snapshot without them), `dflash-supervisor status` and `/metrics`."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from supervisor.client.text import report, waste_line
from supervisor.contract.status import Status, Waste, WasteCount
from supervisor.contract.waste_causes import WasteCause
from supervisor.control.metrics import RestartCauses, render
from tests.fixtures.status_samples import status

SOCK = "/run/dflash-supervisor/control.sock"
REASON = "over-committed: retracting 42.0 requests/min over the last 6 polls (over 10/min)"


def _sample() -> Status:
    s = status(servers=2)
    waste = Waste(kept_tokens=900_000, wasted_tokens=100_000, goodput=0.9, causes=tuple(
        WasteCount(str(c), n, t) for c, n, t in zip(
            WasteCause, (0, 1, 40, 2, 3, 0), (0, 5_000, 80_000, 6_000, 9_000, 0))))
    lowered = replace(s.servers[1], in_flight=40, inflight_limit=40,
                      inflight_limit_reason=REASON)
    return replace(s, waste=waste, servers=(replace(s.servers[0], inflight_limit=64), lowered))


def test_round_trip_and_an_older_snapshot_without_the_fields() -> None:
    s = _sample()
    assert Status.from_json(s.to_json()) == s
    assert s.waste is not None and s.waste.generated_tokens == 1_000_000
    old = status(servers=1)                   # as a daemon from before them sends it
    back = Status.from_json(old.to_json())
    assert back.waste is None and back.servers[0].inflight_limit is None


def test_status_text_says_goodput_by_cause_and_the_lowered_limit() -> None:
    s = _sample()
    lines = [line.strip() for line in report(s, SOCK).splitlines()]
    assert ("waste    goodput 90.0%: 900.0k tokens kept, 100.0k wasted "
            "(stop 5.0k, loop 80.0k, stall 6.0k, retry 9.0k)") in lines
    gpu1 = next(i for i, line in enumerate(lines) if line.startswith("gpu1 "))
    assert " 40/40↓ " in lines[gpu1]
    assert f"in-flight limit 40 of {s.servers[1].max_running}: {REASON}" in lines
    gpu0 = next(line for line in lines if line.startswith("gpu0 "))
    assert f"/{s.servers[0].max_running} " in gpu0 and "↓" not in gpu0
    assert waste_line(Waste()) == "goodput --: 0 tokens kept, 0 wasted"


def test_metrics_carry_waste_by_cause_goodput_and_the_limits() -> None:
    s = _sample()
    text = render(s, (0, 0), RestartCauses(), {}).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    wasted = {x.labels["cause"]: x.value for x in families["dflash_wasted_tokens"].samples}
    assert wasted == {"crash": 0, "stop": 5_000, "loop": 80_000, "stall": 6_000,
                      "retry": 9_000, "requeue": 0}
    assert ('dflash_wasted_tokens_total{cause="loop",job="dflash",partition="0/1"} 80000.0'
            in text)
    assert families["dflash_goodput_ratio"].samples[0].value == 0.9
    assert families["dflash_kept_tokens"].samples[0].value == 900_000
    limits = {x.labels["server"]: x.value for x in families["dflash_server_inflight_limit"].samples}
    assert limits == {"gpu0": 64, "gpu1": 40}
    most = {x.labels["server"]: x.value for x in families["dflash_server_inflight_max"].samples}
    assert most == {"gpu0": s.servers[0].max_running, "gpu1": s.servers[1].max_running}
    # Before the ledger existed (an older daemon's snapshot): no such families at all.
    bare = render(replace(s, waste=None), (0, 0), RestartCauses(), {}).decode()
    assert "dflash_goodput_ratio" not in bare and "dflash_wasted_tokens" not in bare
