"""/metrics carries the flag search: its state as a state set naming the canary, the best
flags' gain, trials done and left; nothing of it from a daemon without the tuner, and no gain
before one is known. Read back with prometheus_client's own parser."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from supervisor.contract import status as c
from supervisor.contract.tuning import TuneState, Tuning
from supervisor.control.metrics import RestartCauses, render
from tests.fixtures import tui_status_data as data


def tune_samples(status: c.Status) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    text = render(status, (0, 0), RestartCauses(), {}).decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("dflash_tune_"):
                own = {k: v for k, v in s.labels.items() if k not in ("job", "partition")}
                out.setdefault(s.name, []).append((own, s.value))
    return out


def test_a_search_mid_trial() -> None:
    got = tune_samples(data.tuning())
    states = {labels["state"]: value for labels, value in got["dflash_tune_state"]}
    assert states == {st.value: (1.0 if st == TuneState.TRIAL else 0.0) for st in TuneState}
    assert {labels["canary"] for labels, _ in got["dflash_tune_state"]} == {"gpu2"}
    assert got["dflash_tune_gain_ratio"] == [({}, 0.413)]
    assert got["dflash_tune_trials_done"] == [({}, 3.0)]
    assert got["dflash_tune_trials_left"] == [({}, 5.0)]


def test_no_gain_before_one_is_known_and_nothing_without_a_tuner() -> None:
    waiting = replace(data.healthy(), tuning=Tuning(state=TuneState.WAITING, canary="gpu0",
                                                    trials_left=8))
    got = tune_samples(waiting)
    assert "dflash_tune_gain_ratio" not in got
    assert [v for labels, v in got["dflash_tune_state"] if labels["state"] == "waiting"] == [1]
    assert tune_samples(replace(data.healthy(), tuning=None)) == {}
