"""The fleet view's waste ledger and saturation guard against two live daemons: both nodes'
simulated servers loop (so tokens are thrown away), node 1's retract (SGLang's KV pool full,
so its saturation guard lowers the in-flight limit). `dflash-supervisor status` with both
sockets and `dflash-tui` with both show each node's goodput, the job's goodput from the
summed ledgers, and the lowered limit with the guard's reason."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import anyio
import pytest

from supervisor.client.control_client import ControlClient
from supervisor.client.fleet_totals import FleetTotals, limit_lowered
from supervisor.contract.status import Status
from tests.fixtures.multinode_nodes import Node, wait_for
from tests.fixtures.node_config import node_config
from tests.fixtures.real_prompts import write_jsonl
from tests.fixtures.tui_pilot import WIDE, settled
from tui.client_protocol import connect
from tui.fleet_app import make_fleet_app
from tui.status_feed import FeedTiming
from tui.widgets.fleet.fleet_table import FleetTable
from tui.widgets.fleet.fleet_totals_line import FleetTotalsLine
from tui.widgets.fleet.node_detail import NodeDetail

pytestmark = pytest.mark.slow

# Paced decoding (a long answer takes seconds) so the job outlasts the test; a quarter of the
# long answers loop and are stopped while they run; SGLang's /metrics read for the guard.
FLAGS = {"sim-instant": "false", "sim-tokens-per-s": "60", "sim-time-scale": "20",
         "sim-loop-share": "0.25", "enable-metrics": "true"}
RETRACTING = {**FLAGS, "sim-fault": '"retract"', "sim-fault-after-s": "1"}


def status_of(socket: str) -> Status:
    with ControlClient(socket, timeout_s=5.0) as client:
        return client.status()


@pytest.fixture(scope="module")
def sockets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    root = tmp_path_factory.mktemp("fleet-waste")
    prompts = write_jsonl(root / "prompts.jsonl",
                          [{"id": f"w{i:04d}", "prompt": f"Explain topic {i} at length."}
                           for i in range(4000)])
    nodes = [Node(i, node_config(root / f"n{i}.toml", prompts=prompts, output=str(root / "out"),
                                 partition=f"{i}/2", slots=16, backup_interval_s=0,
                                 sim_flags=RETRACTING if i == 1 else FLAGS), root / f"node{i}")
             for i in range(2)]
    paths = [str(n.workdir / "control.sock") for n in nodes]
    try:
        for node in nodes:
            node.start(dict(os.environ))

        def ready() -> bool:
            s0, s1 = (status_of(p) for p in paths)
            return (all(s.waste is not None and s.waste.wasted_tokens > 0 for s in (s0, s1))
                    and any(limit_lowered(x) for x in s1.servers))
        wait_for(ready, "loops thrown away on both nodes and node 1's limit lowered", 120.0)
        yield paths
    finally:
        for node in nodes:
            node.stop()


def test_status_text_shows_goodput_and_the_lowered_limit(sockets: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "supervisor", "status",
                           *(a for s in sockets for a in ("--socket", s))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = lines[0].split()
    at = head.index("goodput")
    n0, n1 = (next(x for x in lines if x.startswith(s + " ")) for s in sockets)
    assert n0.split()[at].endswith("%") and "↓" not in n0
    cells = n1.split()
    assert cells[6:8] == ["1/1", "1↓"]                      # servers READY, and lowered
    assert cells[at + 1].endswith("%")                       # shifted by the "1↓" cell
    (why,) = [x for x in lines if x.startswith(f"{sockets[1]} gpu0: in-flight limit ")]
    assert "over-committed" in why
    tokens = next(x for x in lines if x.startswith("tokens: goodput "))
    assert "wasted (loop " in tokens and "in-flight limit lowered on 1 of 2 servers" in tokens
    assert lines[-1].startswith("job: ") and "2/2 nodes answer" in lines[-1]


async def test_fleet_tui_shows_each_nodes_goodput_and_why_a_limit_is_lowered(
        sockets: list[str]) -> None:
    app = make_fleet_app([connect(s) for s in sockets],
                         timing=FeedTiming(retry_initial_s=0.1, retry_max_s=0.5))
    async with app.run_test(size=WIDE) as pilot:
        with anyio.fail_after(30):
            while not all(f.status is not None for f in app.feeds):
                await pilot.pause(0.05)
        await settled(pilot)
        screen = app.screen
        statuses = [f.status for f in app.feeds]
        assert all(s is not None and s.waste is not None for s in statuses)
        # The job's figures are the nodes' ledgers summed, as the app holds them now.
        totals = screen.query_one(FleetTotalsLine).totals
        assert totals == FleetTotals.of([f.row() for f in app.feeds])
        kept = sum(s.waste.kept_tokens for s in statuses)      # type: ignore[union-attr]
        wasted = sum(s.waste.wasted_tokens for s in statuses)  # type: ignore[union-attr]
        assert totals is not None and totals.goodput == kept / (kept + wasted)
        assert totals.limited_servers >= 1
        table = screen.query_one(FleetTable)
        for i, s in enumerate(statuses):
            assert s is not None and s.waste is not None and s.waste.goodput is not None
            assert str(table.get_cell(str(i), "goodput")) == f"{100 * s.waste.goodput:.1f}%"
        assert str(table.get_cell("1", "servers")) == "1/1 1↓"
        await pilot.press("down")
        await settled(pilot)
        lines = [str(x) for x in screen.query_one(NodeDetail).lines()]
        assert lines[0].startswith(f" {sockets[1]} (1/2) ")
        assert lines[1].startswith(" goodput ") and "wasted (loop " in lines[1]
        assert lines[2].startswith(" gpu0 in-flight limit ") and "over-committed" in lines[2]
