"""A real Prometheus (Debian's 2.42) scraping a real daemon's metrics listener (simulated
servers): the series come back through its query API with the job and partition labels, a
counter has a rate, every dashboard query is valid PromQL there, and the alert rules load and
fire nothing on a healthy job. Skipped loudly where Prometheus is not installed."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures import control_daemon as daemon
from tests.fixtures.ports import free_port
from tests.fixtures.prometheus_tools import DASHBOARD, RULES, needs, tool

pytestmark = [pytest.mark.slow, needs("prometheus")]

JOB, PARTITION = "run-01", "1/2"


def _config(path: Path, target: str) -> None:
    # honor_labels: the daemon's own `job` label wins over the scrape job's name (without it
    # Prometheus would rename it exported_job); docs/monitoring.md says the same.
    path.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "dflash-nodes", "honor_labels": True,
                            "static_configs": [{"targets": [target]}]}]}))


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, daemon.Daemon]]:
    base = tmp_path_factory.mktemp("prom")
    listen = f"127.0.0.1:{free_port()}"
    d = daemon.start(base / "job", control={"metrics_listen": listen, "metrics_job": JOB},
                     job={"partition": PARTITION})
    web = f"127.0.0.1:{free_port()}"
    _config(base / "prometheus.yml", listen)
    log = open(base / "prometheus.log", "wb")
    proc = subprocess.Popen([str(tool("prometheus")), f"--config.file={base / 'prometheus.yml'}",
                             f"--storage.tsdb.path={base / 'data'}", f"--web.listen-address={web}",
                             "--log.level=warn"], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL)
    try:
        yield f"http://{web}", d
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        assert d.stop() == 0, d.log()[-3000:]


def query(url: str, expr: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    if answer.status_code == 503:
        return []                         # still starting ("Service Unavailable")
    got = answer.json()
    assert got["status"] == "success", (expr, got)
    return got["data"]["result"]


def until(what: str, check: Callable[[], Any], timeout_s: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout_s
    for _ in range(10_000):
        try:
            got = check()
        except httpx.TransportError:
            got = None                    # Prometheus still starting
        if got:
            return got
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_series_come_back_with_job_and_partition(prom: tuple[str, daemon.Daemon]) -> None:
    url, _ = prom
    got = until("the first scrape", lambda: query(url, 'dflash_prompts_state{state="pending"}'))
    [series] = got
    assert series["metric"]["job"] == JOB and series["metric"]["partition"] == PARTITION
    assert series["metric"]["instance"].startswith("127.0.0.1:")
    assert float(series["value"][1]) > 0
    # `up` is Prometheus' own: it keeps the scrape job's name.
    up = query(url, 'up{job="dflash-nodes"}')
    assert [float(s["value"][1]) for s in up] == [1.0]
    names = {s["metric"]["__name__"] for s in query(url, '{job="run-01"}')}
    unlabelled = query(url, '{__name__=~"dflash_.+", partition=""}')
    assert len(names) > 30 and unlabelled == []


def test_a_counters_rate_is_read_back(prom: tuple[str, daemon.Daemon]) -> None:
    url, _ = prom
    rate = until("a completion rate", lambda: [
        s for s in query(url, f'rate(dflash_completions_total{{job="{JOB}"}}[10s])')
        if float(s["value"][1]) > 0])
    assert rate[0]["metric"]["partition"] == PARTITION
    by_server = query(url, f'sum by (server) (rate(dflash_requests_total{{job="{JOB}",'
                           f'result="completed"}}[10s]))')
    assert {s["metric"]["server"] for s in by_server} == {"gpu0", "gpu1"}


def test_every_dashboard_query_is_valid_promql_here(prom: tuple[str, daemon.Daemon]) -> None:
    url, _ = prom
    until("the first scrape", lambda: query(url, "dflash_prompts_state"))
    dashboard = DASHBOARD.read_text()
    exprs = [t["expr"] for p in json.loads(dashboard)["panels"] for t in p.get("targets", [])]
    with_data = 0
    for expr in exprs:
        concrete = (expr.replace("$job", JOB).replace("$partition", PARTITION)
                    .replace("$__rate_interval", "10s"))
        with_data += bool(query(url, concrete))
    # Some panels are empty on a healthy simulated job (nothing paused, no GPU, no waste).
    assert with_data > len(exprs) // 2, (with_data, len(exprs))


def test_the_alert_rules_load_and_a_healthy_job_fires_none(
        prom: tuple[str, daemon.Daemon]) -> None:
    url, _ = prom
    until("the first scrape", lambda: query(url, "dflash_server_state"))

    def evaluated() -> list[dict[str, Any]]:
        groups = httpx.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        done = all(r.get("lastEvaluation", "").startswith("20") for r in rules)
        return rules if rules and done else []

    rules = until("the rules evaluated", evaluated)
    assert len(rules) == 7 and {r["health"] for r in rules} == {"ok"}
    # Two more evaluations with the series there, then nothing pending or firing.
    stamps = {tuple(r["lastEvaluation"] for r in rules)}
    until("two more evaluations",
          lambda: stamps.add(tuple(r["lastEvaluation"] for r in evaluated())) or len(stamps) > 2)
    alerts = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    assert alerts == []
