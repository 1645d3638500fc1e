"""A whole daemon (`python -m supervisor run`, a child process) whose servers refuse every
request the way SGLang 0.5.23 does when `model` names a LoRA adapter: the breaker pauses
dispatch with SGLang's message in the status, the event log and /metrics; no prompt is
failed; after the fix an operator's resume over the socket gets the job going again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures import REPO
from tests.fixtures import control_daemon as daemon

REFUSING_SERVER = REPO / "tests" / "fixtures" / "refusing_chat_server.py"


def _metric(d: daemon.Daemon, name: str) -> float:
    transport = httpx.HTTPTransport(uds=d.socket)
    with httpx.Client(transport=transport, trust_env=False) as client:
        text = client.get("http://daemon/metrics", timeout=10).text
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == name)


def test_refused_requests_pause_the_daemon_until_an_operator_resumes(tmp_path: Path) -> None:
    data = daemon.config_dict(tmp_path, servers=2)
    data["servers"]["command"] = [sys.executable, str(REFUSING_SERVER)]
    data["servers"]["flags"] = {"max-running-requests": 4, "refuse": "lora400"}
    data["dispatch"] = {"breaker_window": 40, "breaker_min_samples": 20}
    d = daemon.Daemon(daemon.spawn(tmp_path, data), tmp_path, data["control"]["socket"],
                      tmp_path / "daemon.log")
    try:
        daemon._wait_answering(d)
        s = d.wait_status(lambda s: s.paused_by("breaker") is not None, "the breaker's pause")
        reason = s.paused_by("breaker")
        assert reason is not None and reason.startswith("100% of the last 20 requests failed")
        assert "HTTP 400: LoRA adapter 'v2' was requested, but LoRA is not enabled" in reason
        assert s.breaker is not None and s.breaker.tripped == reason
        assert s.breaker.tripped_error == "HTTP 400" and s.job.failed == 0
        assert _metric(d, "dflash_breaker_open") == 1.0

        [(actor, detail)] = d.query("select actor, detail from events "
                                    "where kind='paused' and subject='breaker'")
        assert actor == "supervisor" and json.loads(detail)["sample"].startswith(
            "HTTP 400: LoRA adapter 'v2'")

        for srv in s.servers:               # the operator fixes the setting...
            httpx.post(f"http://127.0.0.1:{srv.port}/mode", content="good",
                       timeout=5, trust_env=False).raise_for_status()
        with d.client() as client:          # ...and resumes
            lifted = client.resume().lifted
        assert [p.source for p in lifted] == ["breaker"]
        s = d.wait_status(lambda s: s.job.done >= 200, "answers after the resume")
        assert not s.paused and s.breaker is not None and s.breaker.tripped is None
        assert s.job.failed == 0 and _metric(d, "dflash_breaker_open") == 0.0
    finally:
        d.stop()
    # Every prompt that met the refusal is pending or done, none failed.
    assert d.query("select count(*) from prompts where status='failed'") == [(0,)]
