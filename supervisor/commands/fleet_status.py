"""`dflash-supervisor status --socket A --socket B ...`: every node of a many-node job on one
screen (sockets forwarded over SSH: `ssh -L /tmp/n1.sock:/run/dflash-supervisor/control.sock
node1`), one row per node and the job's total. A node that does not answer is a row saying
so, not the end of the report; the exit status is 69 when any node is unreachable. Each
node's goodput and tokens wasted, and its servers whose in-flight limit the saturation guard
lowered (`8/8 1↓`, each with its reason under the table); the job's goodput from the summed
ledgers."""

from __future__ import annotations

import argparse
import json
import sys
import time

from supervisor.client.control_client import (
    ControlClient,
    ControlProtocolError,
    ControlRefused,
    ControlUnreachable,
)
from supervisor.client.exit_codes import EXIT_OK, EXIT_UNREACHABLE
from supervisor.client.fleet_totals import FleetTotals, NodeRow
from supervisor.client.text import duration, si, waste_line
from supervisor.contract.codec import dumps
from supervisor.contract.status import Waste


def poll(sockets: list[str], timeout_s: float = 5.0) -> list[NodeRow]:
    rows = []
    for path in sockets:
        try:
            with ControlClient(path, timeout_s=timeout_s) as client:
                rows.append(NodeRow(path, client.status()))
        except (ControlUnreachable, ControlRefused, ControlProtocolError) as exc:
            rows.append(NodeRow(path, None, str(exc)))
    return rows


def table(rows: list[NodeRow], totals: FleetTotals) -> str:
    head = ("node", "part", "done", "%", "req/s", "ETA", "servers", "backlog", "goodput",
            "wasted", "state")
    body = []
    for r in rows:
        s = r.status
        if s is None:
            body.append((r.socket, "?", "-", "-", "-", "-", "-", "-", "-", "-", r.state_text()))
            continue
        ready, servers = r.servers_ready
        pct = f"{100 * s.job.done / s.job.total:.1f}" if s.job.total else "-"
        backlog = str(s.uploads.backlog_shards) if s.uploads is not None else "-"
        eta = "-" if r.remaining == 0 else duration(s.eta.seconds) + (
            "?" if s.eta.warming_up and s.eta.seconds is not None else "")
        lowered = f" {len(r.limited)}↓" if r.limited else ""
        goodput = "-" if r.goodput is None else f"{100 * r.goodput:.1f}%"
        wasted = "-" if r.wasted_tokens is None else si(r.wasted_tokens)
        body.append((r.socket, r.partition, f"{s.job.done:,}/{s.job.total:,}", pct,
                     f"{s.rates.req_per_s:.1f}", eta, f"{ready}/{servers}{lowered}", backlog,
                     goodput, wasted, r.state_text()))
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head) - 1)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)) + "  " + line[-1]
             for line in [head, *body]]
    for r in rows:
        for srv in r.limited:
            lines.append(f"{r.socket} {srv.name}: in-flight limit {srv.inflight_limit} of "
                         f"{srv.max_running}: "
                         f"{srv.inflight_limit_reason or 'lowered by the saturation guard'}")
    lines.append(tokens_line(totals))
    pct = f"{100 * totals.done / totals.total:.1f}%" if totals.total else "-"
    eta = duration(totals.eta_s) if totals.eta_s is not None else "?"
    lines.append(f"job: {totals.done:,}/{totals.total:,} ({pct}), {totals.failed} failed, "
                 f"{totals.req_per_s:.1f} req/s, ETA {eta} ({totals.eta_note}); "
                 f"{totals.nodes_line}, {totals.partitions}")
    return "\n".join(lines)


def tokens_line(totals: FleetTotals) -> str:
    """The job's goodput from every node's ledger summed, and the lowered limits' count."""
    waste = Waste(totals.kept_tokens, totals.wasted_tokens, totals.goodput, totals.waste_causes)
    limits = (f"in-flight limit lowered on {totals.limited_servers} of {totals.servers} "
              f"servers" if totals.limited_servers else "no in-flight limit lowered")
    return f"tokens: {waste_line(waste)}; {limits}"


def fleet_status(args: argparse.Namespace) -> int:
    while True:
        rows = poll(list(args.socket))
        totals = FleetTotals.of(rows)
        if args.json:
            print(json.dumps({"nodes": [{"socket": r.socket, "error": r.error,
                                         "status": json.loads(dumps(r.status))
                                         if r.status is not None else None} for r in rows],
                              "totals": json.loads(dumps(totals))}), flush=True)
        else:
            if args.watch is not None and sys.stdout.isatty():
                print("\x1b[H\x1b[2J", end="")
            print(table(rows, totals), flush=True)
        code = EXIT_OK if totals.answering == totals.nodes else EXIT_UNREACHABLE
        if args.watch is None:
            return code
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return EXIT_OK
