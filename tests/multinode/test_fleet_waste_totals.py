"""The waste ledger and the saturation guard across nodes: the job's goodput is the summed
kept tokens over the summed generated ones (not an average of the nodes' ratios), servers
with a lowered in-flight limit are counted, and `dflash-supervisor status --socket A
--socket B` shows both, per node and for the job, with each lowered limit's reason."""

from __future__ import annotations

import json
from dataclasses import replace

from supervisor.client.fleet_totals import FleetTotals, NodeRow, limit_lowered
from supervisor.commands.fleet_status import table
from supervisor.contract.codec import dumps
from supervisor.contract.status import Status, Waste, WasteCount
from tests.fixtures import tui_status_data as data
from tests.fixtures.tui_pilot import node

REASON = "over-committed: retracting 42.0 requests/min over the last 6 polls (over 10/min)"


def ledger(kept: int, loop: int, crash: int = 0) -> Waste:
    wasted = loop + crash
    return Waste(kept_tokens=kept, wasted_tokens=wasted,
                 goodput=kept / (kept + wasted) if kept + wasted else None,
                 causes=(WasteCount("crash", 1 if crash else 0, crash),
                         WasteCount("loop", 3 if loop else 0, loop),
                         WasteCount("stall", 0, 0)))


def with_limits(s: Status, lowered: dict[int, int]) -> Status:
    """Servers i get their in-flight limit lowered to lowered[i] (of their max running)."""
    servers = tuple(replace(x, inflight_limit=lowered.get(i, x.max_running),
                            inflight_limit_reason=REASON if i in lowered else None)
                    for i, x in enumerate(s.servers))
    return replace(s, servers=servers)


def two_nodes() -> list[NodeRow]:
    big = replace(node(data.healthy(), "0/3", 120_000, 40_000.0),
                  waste=ledger(kept=9_000_000, loop=1_000_000))
    small = replace(with_limits(node(data.healthy(), "1/3", 90_000, 61_000.0), {3: 48, 5: 40}),
                    waste=ledger(kept=10_000, loop=80_000, crash=10_000))
    return [NodeRow("/tmp/n0.sock", big), NodeRow("/tmp/n1.sock", small)]


def test_goodput_is_summed_tokens_not_an_average_of_ratios() -> None:
    totals = FleetTotals.of(two_nodes())
    assert (totals.kept_tokens, totals.wasted_tokens) == (9_010_000, 1_090_000)
    assert totals.goodput == 9_010_000 / 10_100_000        # 89.2%; the mean of 90% and 10% is 50%
    assert {c.cause: (c.requests, c.tokens) for c in totals.waste_causes} == \
        {"crash": (1, 10_000), "loop": (6, 1_080_000), "stall": (0, 0)}
    assert (totals.limited_servers, totals.servers) == (2, 16)


def test_nodes_without_a_ledger_or_an_answer_are_left_out() -> None:
    rows = two_nodes()
    old = replace(rows[0].status, waste=None)               # a daemon from before the ledger
    totals = FleetTotals.of([NodeRow("a", old), rows[1], NodeRow("c", None, "refused")])
    assert (totals.kept_tokens, totals.wasted_tokens) == (10_000, 90_000)
    assert totals.goodput == 0.1 and totals.limited_servers == 2 and totals.servers == 16
    assert NodeRow("a", old).goodput is None and NodeRow("c", None).wasted_tokens is None
    nothing = FleetTotals.of([NodeRow("a", old), NodeRow("c", None, "refused")])
    assert nothing.goodput is None and nothing.kept_tokens == 0
    fresh = FleetTotals.of([NodeRow("a", replace(old, waste=Waste()))])
    assert fresh.goodput is None                            # nothing generated yet


def test_a_limit_counts_only_while_below_the_servers_max() -> None:
    s = data.healthy()
    srv = s.servers[0]
    assert not limit_lowered(srv)                           # not serving: no limit known
    assert not limit_lowered(replace(srv, inflight_limit=srv.max_running))
    assert limit_lowered(replace(srv, inflight_limit=srv.max_running - 1))
    row = NodeRow("x", with_limits(s, {2: 10}))
    assert [x.name for x in row.limited] == ["gpu2"] and NodeRow("y", None).limited == ()


def test_the_fleet_text_shows_goodput_waste_and_lowered_limits() -> None:
    rows = [*two_nodes(), NodeRow("/tmp/n2.sock", None, "connection refused")]
    lines = table(rows, FleetTotals.of(rows)).splitlines()
    head = lines[0].split()
    assert head[head.index("backlog") + 1:head.index("backlog") + 3] == ["goodput", "wasted"]
    n0, n1, n2 = (next(x for x in lines if x.startswith(f"/tmp/n{i}.sock ")) for i in range(3))
    assert n0.split()[6:10] == ["8/8", "2", "90.0%", "1.0M"]
    # 2 of n1's 8 servers run under a lowered limit: the count beside its servers.
    assert n1.split()[6:11] == ["8/8", "2↓", "2", "10.0%", "90.0k"]
    assert "UNREACHABLE" in n2 and n2.split()[8:10] == ["-", "-"]
    limits = [x for x in lines if "in-flight limit" in x and x.startswith("/tmp/")]
    assert limits == [f"/tmp/n1.sock gpu3: in-flight limit 48 of 64: {REASON}",
                      f"/tmp/n1.sock gpu5: in-flight limit 40 of 64: {REASON}"]
    assert lines[-2] == ("tokens: goodput 89.2%: 9.0M tokens kept, 1.1M wasted (crash 10.0k, "
                         "loop 1.1M); in-flight limit lowered on 2 of 16 servers")
    assert lines[-1].startswith("job: 210,000/600,000") and "2/3 nodes answer" in lines[-1]


def test_the_fleet_json_carries_the_totals() -> None:
    totals = json.loads(dumps(FleetTotals.of(two_nodes())))
    assert totals["kept_tokens"] == 9_010_000 and totals["wasted_tokens"] == 1_090_000
    assert totals["limited_servers"] == 2 and round(totals["goodput"], 4) == 0.8921
    assert {"cause": "loop", "requests": 6, "tokens": 1_080_000} in totals["waste_causes"]
