"""The status contract carries a graceful stop in progress and the last reload's outcome;
`dflash-supervisor status` prints them."""

from __future__ import annotations

from supervisor.client.text import report
from supervisor.contract.status import Status
from tests.fixtures.status_samples import status


def test_stopping_and_last_reload_round_trip_and_print():
    s = status(stopping="draining: 3 requests in flight, 40 s of grace left",
               last_reload="reload applied: generation.max_tokens 4096 -> 8192")
    assert Status.from_json(s.to_json()) == s
    text = report(s, "/run/dflash-supervisor/control.sock").splitlines()
    assert "STOPPING draining: 3 requests in flight, 40 s of grace left" in text
    assert "config   reload applied: generation.max_tokens 4096 -> 8192" in text


def test_a_running_daemon_prints_neither():
    text = report(status(), "/run/dflash-supervisor/control.sock")
    assert "STOPPING" not in text and "config   " not in text



def test_an_adopted_server_says_so_in_the_status_text():
    from dataclasses import replace

    from tests.fixtures.status_samples import server

    adopted = server(0, state_reason="adopted pid 4242, up 3h12m: /health_generate answered 200")
    text = report(replace(status(), servers=(adopted, server(1))),
                  "/run/dflash-supervisor/control.sock").splitlines()
    assert "           adopted pid 4242, up 3h12m: /health_generate answered 200" in text
    # A server launched by this daemon has no such line.
    assert not [line for line in text if line.strip() == "health_generate answered 200"]
