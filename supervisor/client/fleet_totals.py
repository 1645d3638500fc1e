"""Many nodes' status snapshots read together: one row per node and the job's total.

Standard library and contract records only, like the contract itself: `dflash-supervisor
status --socket A --socket B` and the TUI's fleet screen both read it. Each node works its
own partition, so the job ends when the slowest node ends: the job's ETA is the largest
node ETA, not the remaining total over the summed rate (which would hide a straggler).
Likewise the job's goodput is its kept tokens over all its generated tokens, every node's
summed, not an average of the nodes' ratios (a small node would weigh as much as a big one).
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.contract.status import ServerState, ServerStatus, Status, Waste, WasteCount


def limit_lowered(server: ServerStatus) -> bool:
    """The saturation guard holds this server's in-flight limit below its max running."""
    return server.inflight_limit is not None and server.inflight_limit < server.max_running


@dataclass(frozen=True)
class NodeRow:
    socket: str
    status: Status | None        # None: no answer
    error: str | None = None     # why not
    # The daemon no longer answers, and the last status it sent (`status`, its farewell at
    # shutdown: control/hub.py) had every prompt of its partition answered: a node that
    # finished and exited, as `run` does. Its figures are final, so they still count in the
    # job's totals. Only a client that saw that last status (the TUI) can know it; a one-shot
    # `status` sees a silent node.
    exited: bool = False

    @staticmethod
    def finished(status: Status) -> bool:
        """Nothing left to send: what a node's last status says when its daemon exits at
        the end of its partition (the last shards' uploads come after the socket closes,
        so its backlog may still show them)."""
        return status.job.pending + status.job.in_flight == 0

    @property
    def partition(self) -> str:
        return self.status.partition or "-" if self.status is not None else "?"

    @property
    def remaining(self) -> int:
        if self.status is None:
            return 0
        j = self.status.job
        return j.pending + j.in_flight

    @property
    def servers_ready(self) -> tuple[int, int]:
        if self.status is None:
            return 0, 0
        servers = self.status.servers
        return sum(s.state is ServerState.READY for s in servers), len(servers)

    @property
    def goodput(self) -> float | None:
        """Kept / generated tokens over this node's whole job; None: not known (no answer, a
        daemon from before the waste ledger, or nothing generated yet)."""
        w = self.status.waste if self.status is not None else None
        return w.goodput if w is not None else None

    @property
    def wasted_tokens(self) -> int | None:
        w = self.status.waste if self.status is not None else None
        return w.wasted_tokens if w is not None else None

    @property
    def limited(self) -> tuple[ServerStatus, ...]:
        """Its servers whose in-flight limit the saturation guard has lowered."""
        if self.status is None:
            return ()
        return tuple(s for s in self.status.servers if limit_lowered(s))

    def state_text(self) -> str:
        """The one thing an operator must see about this node, or a calm word."""
        if self.status is None:
            return f"UNREACHABLE: {self.error or 'no answer'}"
        if self.exited:
            u = self.status.uploads
            if u is not None and u.backlog_shards:
                # The daemon uploads these before it exits; `verify` is the proof.
                return (f"finished (daemon exited with {u.backlog_shards} shards still to "
                        f"upload at its last status)")
            return "finished (daemon exited)"
        s = self.status
        failed = [x.name for x in s.servers if x.state is ServerState.FAILED]
        if s.uploads is not None and s.uploads.stopped:
            return f"UPLOADS STOPPED: {s.uploads.stopped}"
        if failed:
            return f"FAILED: {', '.join(failed)}"
        if s.paused:
            return f"PAUSED ({s.paused[0].source}): {s.paused[0].reason}"
        if self.remaining == 0:
            return "finished"
        return "warming up" if s.eta.warming_up else "running"


@dataclass(frozen=True)
class FleetTotals:
    nodes: int
    answering: int
    total: int
    done: int
    failed: int
    remaining: int
    req_per_s: float
    eta_s: float | None          # None: unknown (a node silent, or one without an ETA yet)
    eta_note: str                # why unknown, or which node sets it
    partitions: str              # "3 of 3 partitions" / a warning when they do not add up
    # The waste ledgers of the nodes that answer and have one, summed: goodput = kept /
    # (kept + wasted), None before any of them generated a token.
    kept_tokens: int = 0
    wasted_tokens: int = 0
    goodput: float | None = None
    waste_causes: tuple[WasteCount, ...] = ()    # by cause, summed over the nodes
    # Servers (over every node that answers) whose in-flight limit is lowered now, and how
    # many servers there are.
    limited_servers: int = 0
    servers: int = 0
    exited: int = 0              # nodes that finished and exited (counted in the totals)

    @classmethod
    def of(cls, rows: list[NodeRow]) -> FleetTotals:
        up = [r for r in rows if r.status is not None]       # exited nodes' last status too
        live = [r for r in up if not r.exited]
        total = sum(r.status.job.total for r in up if r.status)
        done = sum(r.status.job.done for r in up if r.status)
        failed = sum(r.status.job.failed for r in up if r.status)
        remaining = sum(r.remaining for r in up)
        rate = sum(r.status.rates.req_per_s for r in live if r.status)
        eta, note = _eta(rows)
        ledgers = [r.status.waste for r in up if r.status and r.status.waste is not None]
        kept = sum(w.kept_tokens for w in ledgers)
        wasted = sum(w.wasted_tokens for w in ledgers)
        return cls(len(rows), len(live), total, done, failed, remaining, rate, eta, note,
                   _partitions(up), kept_tokens=kept, wasted_tokens=wasted,
                   goodput=kept / (kept + wasted) if kept + wasted else None,
                   waste_causes=_causes(ledgers),
                   limited_servers=sum(len(r.limited) for r in live),
                   servers=sum(len(r.status.servers) for r in live if r.status),
                   exited=len(up) - len(live))

    @property
    def nodes_line(self) -> str:
        """"3/3 nodes answer", and how many of the silent ones finished and exited."""
        text = f"{self.answering}/{self.nodes} nodes answer"
        return text + (f" ({self.exited} finished and exited)" if self.exited else "")

    @property
    def all_accounted(self) -> bool:
        """Every node answers or has finished: no node's figures are missing."""
        return self.answering + self.exited == self.nodes


def _eta_seconds(row: NodeRow) -> float:
    return (row.status.eta.seconds or 0.0) if row.status is not None else 0.0


def _eta(rows: list[NodeRow]) -> tuple[float | None, str]:
    silent = [r.socket for r in rows if r.status is None]
    if silent:
        return None, f"unknown: {silent[0]} does not answer"
    busy = [r for r in rows if r.remaining > 0]
    if not busy:
        return 0.0, "finished"
    unknown = [r for r in busy if r.status is not None and r.status.eta.seconds is None]
    if unknown:
        return None, f"unknown: partition {unknown[0].partition} has no rate yet"
    slowest = max(busy, key=_eta_seconds)
    assert slowest.status is not None
    return slowest.status.eta.seconds, f"partition {slowest.partition} is the slowest"


def _causes(ledgers: list[Waste]) -> tuple[WasteCount, ...]:
    """Each cause's requests and tokens over the nodes, in the order the nodes name them."""
    summed: dict[str, tuple[int, int]] = {}
    for w in ledgers:
        for c in w.causes:
            requests, tokens = summed.get(c.cause, (0, 0))
            summed[c.cause] = (requests + c.requests, tokens + c.tokens)
    return tuple(WasteCount(cause, r, t) for cause, (r, t) in summed.items())


def _partitions(up: list[NodeRow]) -> str:
    seen = [r.status.partition for r in up if r.status and r.status.partition]
    counts = {p.split("/")[1] for p in seen}
    if not seen:
        return "no partitions"
    if len(counts) > 1:
        return f"MIXED partition counts {sorted(counts)}: not one job"
    n = int(counts.pop())
    dup = sorted({p for p in seen if seen.count(p) > 1})
    text = f"{len(set(seen))} of {n} partitions"
    return text + (f", {', '.join(dup)} twice" if dup else "")
