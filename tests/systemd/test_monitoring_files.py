"""The Grafana dashboard and the alert rules shipped in systemd/: every metric they name is
one the daemon's /metrics has, and promtool passes the rules and runs their unit tests
(a FAILED server fires, a healthy job fires nothing: systemd/prometheus/dflash-alerts.test.yml)."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace

import yaml
from prometheus_client.parser import text_string_to_metric_families

from supervisor.contract import status as c
from supervisor.contract.tuning import TuneState, Tuning
from supervisor.control.metrics import RestartCauses, render
from tests.fixtures import status_samples as samples
from tests.fixtures.prometheus_tools import DASHBOARD, RULE_TESTS, RULES, needs, tool

METRIC = re.compile(r"\b(dflash_[a-z0-9_]+)\b")


def exposed() -> set[str]:
    """The sample names a daemon with every part of the status set exposes (counters with
    their `_total`, whether or not a sample is there yet)."""
    s = samples.status(servers=2)
    s = replace(s, breaker=c.Breaker(window=200, samples=200, error_rate=0.1, threshold=0.5,
                                     errors=(c.ErrorCount("timeout", 20),), requests_total=9,
                                     errors_total=1),
                waste=c.Waste(kept_tokens=900, wasted_tokens=100, goodput=0.9,
                              causes=(c.WasteCount("crash", 2, 100),)), job_name="run-01",
                quality=replace(s.quality, long_rate=0.1, thinking_truncated_rate=0.02,
                                answer_truncated_rate=0.01, loops_aborted_total=3,
                                loop_tokens_saved=900, stalled_total=1),
                continuation=c.Continuation(continuable=40, tokens_kept=160_000, without_ids=2,
                                            pending=5),
                tuning=Tuning(state=TuneState.TRIAL, canary="gpu1", gain=0.3, trials_done=2,
                              trials_left=4))
    text = render(s, (10, 100), RestartCauses(), {"gpu0": (5, 1)}).decode()
    return {f.name + "_total" if f.type == "counter" else f.name
            for f in text_string_to_metric_families(text)}


def dashboard_queries() -> list[str]:
    def walk(node: object) -> list[str]:
        if isinstance(node, dict):
            found = [node["expr"]] if isinstance(node.get("expr"), str) else []
            q = node.get("query")
            if isinstance(q, dict) and isinstance(q.get("query"), str):
                found.append(q["query"])
            return found + [e for v in node.values() for e in walk(v)]
        if isinstance(node, list):
            return [e for v in node for e in walk(v)]
        return []
    return walk(json.loads(DASHBOARD.read_text()))


def rule_exprs() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups for r in g["rules"]}


def test_every_metric_the_dashboard_queries_is_exposed() -> None:
    queries = dashboard_queries()
    assert len(queries) > 40
    have = exposed()
    named = {m for q in queries for m in METRIC.findall(q)}
    assert named - have == set(), f"the dashboard queries metrics /metrics lacks: {named - have}"
    assert all(METRIC.search(q) for q in queries)


def test_the_dashboard_is_one_grafana_can_import() -> None:
    d = json.loads(DASHBOARD.read_text())
    assert d["uid"] and d["title"] and isinstance(d["schemaVersion"], int)
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    assert [p.get("repeat") for p in d["panels"] if p["type"] == "row"] == [None, "partition"]
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        for t in p["targets"]:
            # Every query is one job's: a Prometheus watching two jobs keeps them apart.
            assert 'job="$job"' in t["expr"], (p["title"], t["expr"])


def test_the_dashboard_shows_what_an_operator_watches() -> None:
    named = {m for q in dashboard_queries() for m in METRIC.findall(q)}
    for metric in ("dflash_prompts_state", "dflash_requests_per_second",
                   "dflash_output_tokens_per_second", "dflash_eta_low_seconds",
                   "dflash_eta_high_seconds", "dflash_wasted_tokens_total",
                   "dflash_goodput_ratio", "dflash_truncation_loop_ratio", "dflash_server_state",
                   "dflash_in_flight", "dflash_server_inflight_limit",
                   "dflash_server_sglang_running_requests", "dflash_server_sglang_queued_requests",
                   "dflash_server_kv_cache_usage_ratio", "dflash_server_restarts_total",
                   "dflash_upload_backlog_shards", "dflash_gpu_power_watts",
                   "dflash_energy_joules_per_token", "dflash_continued_tokens_total",
                   "dflash_continuable_answers", "dflash_continuations_pending",
                   "dflash_tune_state", "dflash_tune_gain_ratio", "dflash_tune_trials_left"):
        assert metric in named, metric


def test_every_metric_the_alerts_name_is_exposed() -> None:
    exprs = rule_exprs()
    assert set(exprs) == {"DflashServerFailed", "DflashBreakerOpen", "DflashJobPaused",
                          "DflashNoCompletions", "DflashNodeMetricsGone", "DflashLowGoodput",
                          "DflashUploadBacklogGrowing"}
    have = exposed()
    named = {m for e in exprs.values() for m in METRIC.findall(e)}
    assert named and named - have == set(), named - have


@needs("promtool")
def test_promtool_passes_the_rules() -> None:
    got = subprocess.run([str(tool("promtool")), "check", "rules", str(RULES)],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and "SUCCESS: 7 rules found" in got.stdout, got.stdout + got.stderr


@needs("promtool")
def test_promtool_runs_the_alerts_unit_tests() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case["alert_rule_test"]
             if t.get("exp_alerts")}
    assert fired == set(rule_exprs())          # each alert has a case where it fires
    got = subprocess.run([str(tool("promtool")), "test", "rules", str(RULE_TESTS)],
                         capture_output=True, text=True, timeout=120, cwd=RULE_TESTS.parent)
    assert got.returncode == 0 and "SUCCESS" in got.stdout, got.stdout + got.stderr
