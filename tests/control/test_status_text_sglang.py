"""`dflash-supervisor status` prints each server's SGLang figures (its /metrics) under the
server's line, and says OVER-COMMITTED with the reason; a server whose metrics are not read
gets only the reason, where there is one (metrics switched off: what is blind)."""

from __future__ import annotations

from dataclasses import replace

from supervisor.client.text import report
from tests.fixtures.status_samples import status

SOCK = "/run/dflash-supervisor/control.sock"


def test_sglang_figures_and_overcommit_under_each_server() -> None:
    s = status(servers=3)
    lines = report(s, SOCK).splitlines()
    sglang = [line.strip() for line in lines if line.strip().startswith("sglang ")]
    assert sglang == [
        "sglang   52 running, 0 queued, KV 91%, 2210 tok/s (/metrics: HTTP 503)",
        "sglang   53 running, 8 queued, KV 91%, 2210 tok/s, 15 retracted/min; OVER-COMMITTED: "
        "queue held over 3 polls (8 -> 8 waiting) while running 53 of our 61 in flight",
        "sglang   54 running, 0 queued, KV 91%, 2210 tok/s, 30 retracted/min",
    ]
    # Each under its own server's line.
    at = [i for i, line in enumerate(lines) if line.strip().startswith(("gpu1 ", "sglang "))]
    assert lines[at[1]].strip().startswith("gpu1") and "OVER-COMMITTED" in lines[at[2]]


def test_no_line_without_sglang_metrics_and_na_for_missing_figures() -> None:
    s = status(servers=2)
    bare = replace(s.servers[0], sglang_metrics=False, sglang_error=None)
    na = replace(s.servers[1], sglang_running=None, sglang_queued=None, token_usage=None,
                 gen_throughput=None, retractions_per_s=None, overcommitted=False,
                 sglang_error="/metrics: no answer within 5 s")
    text = report(replace(s, servers=(bare, na)), SOCK)
    assert text.count("sglang   ") == 1
    assert ("sglang   n/a running, n/a queued, KV n/a, n/a tok/s "
            "(/metrics: no answer within 5 s)") in text


def test_a_server_run_without_metrics_says_what_is_blind() -> None:
    """The job's flags set enable-metrics = false: the monitor's note, under the server."""
    from supervisor.servers.sglang_monitor import BLIND
    s = status(servers=1)
    blind = replace(s.servers[0], sglang_metrics=False, sglang_running=None,
                    sglang_queued=None, token_usage=None, gen_throughput=None,
                    retractions_per_s=None, overcommitted=False, sglang_error=BLIND)
    text = report(replace(s, servers=(blind,)), SOCK)
    assert ("sglang   no SGLang /metrics (enable-metrics off): over-commit, saturation and "
            "waiting detection are blind") in text
