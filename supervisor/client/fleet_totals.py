"""Many nodes' status snapshots read together: one row per node and the job's total.

Standard library and contract records only, like the contract itself: `dflash-supervisor
status --socket A --socket B` and the TUI's fleet screen both read it. Each node works its
own partition, so the job ends when the slowest node ends: the job's ETA is the largest
node ETA, not the remaining total over the summed rate (which would hide a straggler).
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.contract.status import ServerState, Status


@dataclass(frozen=True)
class NodeRow:
    socket: str
    status: Status | None        # None: no answer
    error: str | None = None     # why not

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

    def state_text(self) -> str:
        """The one thing an operator must see about this node, or a calm word."""
        if self.status is None:
            return f"UNREACHABLE: {self.error or 'no answer'}"
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

    @classmethod
    def of(cls, rows: list[NodeRow]) -> FleetTotals:
        up = [r for r in rows if r.status is not None]
        total = sum(r.status.job.total for r in up if r.status)
        done = sum(r.status.job.done for r in up if r.status)
        failed = sum(r.status.job.failed for r in up if r.status)
        remaining = sum(r.remaining for r in up)
        rate = sum(r.status.rates.req_per_s for r in up if r.status)
        eta, note = _eta(rows)
        return cls(len(rows), len(up), total, done, failed, remaining, rate, eta, note,
                   _partitions(up))


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
    slowest = max(busy, key=lambda r: r.status.eta.seconds or 0.0)  # type: ignore[union-attr]
    assert slowest.status is not None
    return slowest.status.eta.seconds, f"partition {slowest.partition} is the slowest"


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
