"""The control socket's /metrics carries each server's SGLang figures and its over-commit
flag, read back with prometheus_client's own parser; a figure SGLang did not give has no
sample (never a 0 that would read as "idle")."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from supervisor.contract import status as c
from supervisor.control.metrics import RestartCauses, render
from tests.fixtures import status_samples as samples


def _samples(status: c.Status) -> dict[str, dict[str, float]]:
    """sample name -> server -> value, for the per-server families."""
    out: dict[str, dict[str, float]] = {}
    text = render(status, (0, 0), RestartCauses(), {}).decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "server" in s.labels and s.name.startswith("dflash_server_"):
                out.setdefault(s.name, {})[s.labels["server"]] = s.value
    return out


def test_sglang_figures_and_overcommit_per_server() -> None:
    status = samples.status(servers=3)
    got = _samples(status)
    assert got["dflash_server_sglang_running_requests"] == {"gpu0": 52, "gpu1": 53, "gpu2": 54}
    assert got["dflash_server_sglang_queued_requests"] == {"gpu0": 0, "gpu1": 8, "gpu2": 0}
    assert got["dflash_server_kv_cache_usage_ratio"]["gpu2"] == 0.91
    assert got["dflash_server_sglang_retractions_total"] == {"gpu0": 0, "gpu1": 17, "gpu2": 34}
    assert got["dflash_server_sglang_retractions_per_second"]["gpu2"] == 0.5
    assert got["dflash_server_sglang_generation_tokens_per_second"]["gpu1"] == 2210.5
    assert got["dflash_server_overcommitted"] == {"gpu0": 0, "gpu1": 1, "gpu2": 0}


def test_a_server_without_sglang_metrics_has_no_figures_only_the_flag() -> None:
    status = samples.status(servers=2)
    bare = replace(status.servers[1], sglang_metrics=False, sglang_running=None,
                   sglang_queued=None, token_usage=None, retractions=None,
                   retractions_per_s=None, gen_throughput=None, overcommitted=False,
                   overcommit_reason=None)
    got = _samples(replace(status, servers=(status.servers[0], bare)))
    for name in ("dflash_server_sglang_running_requests", "dflash_server_sglang_queued_requests",
                 "dflash_server_kv_cache_usage_ratio", "dflash_server_sglang_retractions_total",
                 "dflash_server_sglang_generation_tokens_per_second"):
        assert set(got[name]) == {"gpu0"}, name
    assert got["dflash_server_overcommitted"] == {"gpu0": 0, "gpu1": 0}
