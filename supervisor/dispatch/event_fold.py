"""Per-request events folded into one row per server per interval.

A loop aborted or a request stalled is a fact about one request, and with loops common they
come a few a second (a loop share of 0.25 is ~2 `loop_aborted` a second on an 8-GPU node;
18,000 rows over a 900K-prompt job): one audit row each floods the TUI's events pane and the
events table people read. The per-request facts live elsewhere already (the prompts table's
`loop` flag, the waste ledger's `loop` and `stall` rows with prompt and server), so the events
table keeps the story: the first such event of a quiet spell is written at once, as it was;
what follows within `window_s` is folded into one summary row written when the window ends,
with the count, the summed tokens, and a few samples. While the flood lasts there is one
summary per window; a window with nothing in it closes, and the next event is again written at
once. The kind names do not change (audit SQL selects by kind), every row carries `count`, and
`tokens` / `saved` are over the requests the row covers, so `sum(json_extract(detail,
'$.count'))` is exact over both forms. Nothing pending is lost at a stop: `close()` writes it.

Other kinds pass through untouched. The clock is injected so the windows can be tested
without waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from supervisor.contract.event_kinds import EventKind

log = logging.getLogger("supervisor.dispatch")

WINDOW_S = 30.0
SAMPLES = 5


@dataclass(frozen=True)
class FoldRule:
    """How a kind's per-request details add up."""
    sums: tuple[str, ...]                # numbers added over the folded requests
    sample: tuple[str, ...]              # what a sample keeps of each request's detail
    tally: str | None = None             # a word counted by value ("part": thinking/answer)
    latest: tuple[str, ...] = ()         # settings that hold for all: the newest value kept


RULES: dict[str, FoldRule] = {
    EventKind.LOOP_ABORTED: FoldRule(sums=("tokens", "saved"),
                                     sample=("prompt", "rid", "part", "tokens", "saved",
                                             "snippet"),
                                     tally="part"),
    EventKind.REQUEST_STALLED: FoldRule(sums=("tokens",),
                                        sample=("prompt", "rid", "tokens", "waited"),
                                        latest=("stall_s",)),
}


@dataclass
class _Window:
    """One (kind, subject, actor)'s open window and what was folded into it so far."""
    ends_at: float
    count: int = 0
    first_at: float | None = None
    last_at: float | None = None
    sums: dict[str, float] = field(default_factory=dict)
    tally: dict[str, int] = field(default_factory=dict)
    latest: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class FoldedEvent:
    """A summary row to write: the fields of `Store.add_event`."""
    kind: str
    subject: str
    detail: dict[str, Any]
    actor: str
    time: float


Write = Callable[[str, str, dict[str, Any], str, float], Awaitable[Any]]


def _number(value: Any) -> float:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


class EventFold:
    """`admit()` says whether an event is written now (its detail, with `count` 1) or folded
    (None); `run()` writes each window's summary when it ends; `close()` writes what is
    pending at a stop. The writer is `Store.add_event`'s signature, awaited."""

    def __init__(self, write: Write, *, window_s: float = WINDOW_S, samples: int = SAMPLES,
                 clock: Callable[[], float] = time.time,
                 rules: dict[str, FoldRule] | None = None) -> None:
        if window_s <= 0:
            raise ValueError(f"event fold window must be positive, got {window_s}")
        self._write = write
        self.window_s = window_s
        self.samples = samples
        self.clock = clock
        self.rules = RULES if rules is None else rules
        self._windows: dict[tuple[str, str, str], _Window] = {}
        self._wake = anyio.Event()
        self._closed = False

    # -- the fold itself (synchronous, clock passed in) -------------------------------------

    def admit(self, kind: str, subject: str, detail: dict[str, Any], actor: str,
              now: float) -> dict[str, Any] | None:
        rule = self.rules.get(kind)
        if rule is None:
            return detail
        key = (kind, subject, actor)
        window = self._windows.get(key)
        if window is None or self._closed:
            if not self._closed:
                self._windows[key] = _Window(ends_at=now + self.window_s)
                self._wake.set()
            return {"count": 1, **detail}
        window.count += 1
        window.first_at = now if window.first_at is None else window.first_at
        window.last_at = now
        for name in rule.sums:
            window.sums[name] = window.sums.get(name, 0) + _number(detail.get(name))
        if rule.tally is not None:
            word = str(detail.get(rule.tally, "?"))
            window.tally[word] = window.tally.get(word, 0) + 1
        for name in rule.latest:
            if name in detail:
                window.latest[name] = detail[name]
        if len(window.samples) < self.samples:
            window.samples.append({n: detail[n] for n in rule.sample if n in detail})
        return None

    def due(self, now: float) -> list[FoldedEvent]:
        """Summaries of the windows that have ended; a window with something in it starts
        again (a flood gives one row per window), an empty one closes."""
        out = []
        for key, window in list(self._windows.items()):
            if window.ends_at > now:
                continue
            if window.count:
                out.append(self._summary(key, window, now))
                self._windows[key] = _Window(ends_at=now + self.window_s)
            else:
                del self._windows[key]
        return out

    def drain(self, now: float) -> list[FoldedEvent]:
        """Every pending summary, whether its window has ended or not; nothing stays open."""
        out = [self._summary(key, w, now) for key, w in self._windows.items() if w.count]
        self._windows.clear()
        return out

    def next_deadline(self) -> float | None:
        return min((w.ends_at for w in self._windows.values()), default=None)

    def pending(self) -> int:
        """Requests folded and not written yet."""
        return sum(w.count for w in self._windows.values())

    def _summary(self, key: tuple[str, str, str], window: _Window, now: float) -> FoldedEvent:
        kind, subject, actor = key
        rule = self.rules[kind]
        detail: dict[str, Any] = {"count": window.count}
        for name in rule.sums:
            value = window.sums.get(name, 0)
            detail[name] = int(value) if float(value).is_integer() else value
        if rule.tally is not None:
            detail[rule.tally + "s"] = dict(sorted(window.tally.items()))
        detail.update(window.latest)
        detail.update({"first_at": window.first_at, "last_at": window.last_at,
                       "window_s": self.window_s, "samples": list(window.samples)})
        return FoldedEvent(kind, subject, detail, actor, now)

    # -- the writer -------------------------------------------------------------------------

    async def run(self) -> None:
        """Writes each summary when its window ends, until close()."""
        while not self._closed:
            deadline = self.next_deadline()
            self._wake = anyio.Event()
            if deadline is None:
                await self._wake.wait()
            else:
                with anyio.move_on_after(max(0.0, deadline - self.clock())):
                    await self._wake.wait()
            if self._closed:
                return
            for event in self.due(self.clock()):
                await self._put(event)

    async def close(self) -> None:
        """At a stop: write what is pending now (shielded: a cancelled job still keeps its
        counts) and end run(); events admitted from now on are written one by one."""
        self._closed = True
        self._wake.set()
        with anyio.CancelScope(shield=True):
            for event in self.drain(self.clock()):
                await self._put(event)

    async def _put(self, event: FoldedEvent) -> None:
        await self._write(event.kind, event.subject, event.detail, event.actor, event.time)


def named_requests(detail: dict[str, Any]) -> list[dict[str, Any]]:
    """The requests a row names: itself when written at once, its samples when a summary
    (all of them when `count` is at most the samples kept). For readers of the table."""
    samples = detail.get("samples")
    if isinstance(samples, list):
        return [s for s in samples if isinstance(s, dict)]
    return [detail]
