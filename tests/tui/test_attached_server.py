"""An attached server (servers.attach) on screen: the TUI's row says where it is, and while
GONE since when and why, its state in its own colour; its restart key says at once that
the daemon never restarts it and sends nothing; `status` prints its URL and GONE reason;
the contract carries GONE and the URL through a JSON round trip."""

from __future__ import annotations

from dataclasses import replace

from supervisor.client.text import report
from supervisor.contract.status import ServerState, Status
from tests.fixtures import tui_status_data as data
from tests.fixtures.fake_daemon_client import FakeDaemon
from tests.fixtures.status_samples import status
from tests.fixtures.tui_pilot import STILL
from tui.app import make_app
from tui.screens.main_screen import MainScreen
from tui.widgets.servers.server_table import STATE_STYLE, ServerTable, row_cells

URL = "http://node7:30000"
GONE_REASON = ("unreachable since 12:03:41: connection to node7:30000 failed: Connection "
               "refused; its requests in flight went back to pending, probing until it answers")


def _attached(s: Status, state: ServerState, reason: str) -> Status:
    ext = replace(s.servers[-1], name="ext0", gpus=(), pid=None, argv=(), state=state,
                  state_reason=reason, attached_url=URL, last_exit_reason=None,
                  uptime_s=None if state is ServerState.GONE else 60.0,
                  in_flight=0 if state is ServerState.GONE else 5)
    return replace(s, servers=(*s.servers[:-1], ext))


def test_the_row_says_where_it_is_and_since_when_it_is_gone() -> None:
    s = status(servers=2)
    ready = _attached(s, ServerState.READY, f"{URL} answers /health_generate 200").servers[-1]
    gone = _attached(s, ServerState.GONE, GONE_REASON).servers[-1]
    assert str(row_cells(ready, {})["last_exit"]) == f"attached {URL}"
    cells = row_cells(gone, {})
    assert str(cells["state"]) == "GONE" and cells["state"].style == STATE_STYLE[ServerState.GONE]
    assert str(cells["last_exit"]).startswith("unreachable since 12:03:41: connection to")
    # An own server's row is as before.
    assert row_cells(s.servers[0], {})["last_exit"] == "—"


def test_status_text_prints_the_url_and_the_gone_reason() -> None:
    text = report(_attached(status(servers=2), ServerState.GONE, GONE_REASON), "sock")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("ext0 "))
    assert "GONE" in lines[at]
    assert lines[at + 1].strip() == f"attached {URL} (not launched, restarted or stopped by " \
                                    "the daemon)"
    assert lines[at + 2].strip() == GONE_REASON


def test_gone_and_the_url_survive_the_contract_round_trip() -> None:
    s = _attached(status(servers=2), ServerState.GONE, GONE_REASON)
    back = Status.from_json(Status.to_json(s))
    assert back == s and back.servers[-1].attached_url == URL
    assert back.servers[-1].state is ServerState.GONE
    assert back.servers[0].attached_url is None


async def test_the_restart_key_on_an_attached_server_sends_nothing() -> None:
    daemon = FakeDaemon(_attached(data.healthy(2), ServerState.GONE, GONE_REASON))
    app = make_app(daemon, timing=STILL)
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(app.screen, MainScreen) and app.screen.status is not None:
                break
        table = app.screen.query_one(ServerTable)
        table.focus()
        table.move_cursor(row=1)
        await pilot.pause(0.05)
        assert table.selected is not None and table.selected.name == "ext0"
        await pilot.press("r")
        await pilot.pause(0.1)
        assert isinstance(app.screen, MainScreen)          # no confirm dialog
        assert not [c for c in daemon.calls if c[0] == "restart"]
        notes = [n.message for n in app._notifications]
        assert any(f"ext0 is attached ({URL}): the daemon never restarts it" in n
                   for n in notes), notes

