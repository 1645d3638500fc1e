"""The job across nodes from their snapshots: totals, the slowest node's ETA, and partitions
that do not add up to one job."""

from __future__ import annotations

from dataclasses import replace

from supervisor.client.fleet_totals import FleetTotals, NodeRow
from tests.fixtures import tui_status_data as data
from tests.fixtures.tui_pilot import node


def test_job_eta_is_the_slowest_node_and_unknown_while_one_is_silent() -> None:
    a = node(data.healthy(), "0/2", 10, 100.0)
    b = node(data.healthy(), "1/2", 10, 250.0)
    totals = FleetTotals.of([NodeRow("a", a), NodeRow("b", b)])
    assert (totals.eta_s, totals.eta_note) == (250.0, "partition 1/2 is the slowest")
    assert totals.done == 20 and totals.total == 600_000 and totals.partitions == "2 of 2 partitions"
    silent = FleetTotals.of([NodeRow("a", a), NodeRow("b", None, "refused")])
    assert silent.eta_s is None and "b does not answer" in silent.eta_note
    mixed = FleetTotals.of([NodeRow("a", a), NodeRow("c", node(data.healthy(), "1/3", 1, 1.0))])
    assert mixed.partitions.startswith("MIXED")
    done = replace(a, job=replace(a.job, pending=0, in_flight=0))
    assert FleetTotals.of([NodeRow("a", done)]).eta_s == 0.0


def test_a_finished_node_that_exited_counts_in_the_totals_but_not_in_the_rate() -> None:
    a = node(data.healthy(), "0/2", 10, 100.0)
    last = node(data.healthy(), "1/2", 300_000, 0.0)
    assert last.uploads is not None
    last = replace(last, job=replace(last.job, pending=0, in_flight=0),
                   uploads=replace(last.uploads, backlog_shards=0))
    assert NodeRow.finished(last) and not NodeRow.finished(a)
    totals = FleetTotals.of([NodeRow("a", a), NodeRow("b", last, "refused", exited=True)])
    assert totals.done == 300_010 and totals.answering == 1 and totals.exited == 1
    assert totals.all_accounted and totals.nodes_line == "1/2 nodes answer (1 finished and exited)"
    assert totals.req_per_s == a.rates.req_per_s
    assert (totals.eta_s, totals.eta_note) == (100.0, "partition 0/2 is the slowest")
    assert NodeRow("b", last, exited=True).state_text() == "finished (daemon exited)"
    # Its last shards were still to upload when the socket closed: said, still finished.
    waiting = replace(last, uploads=replace(last.uploads, backlog_shards=3))
    assert NodeRow.finished(waiting)
    assert NodeRow("b", waiting, exited=True).state_text() == (
        "finished (daemon exited with 3 shards still to upload at its last status)")
    # Prompts left: not finished.
    assert not NodeRow.finished(replace(last, job=replace(last.job, pending=1)))
