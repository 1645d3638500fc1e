"""The job at a glance: a progress bar with done/total and the ETA (with its 80% interval
where the estimator gives one), then the windowed rates, truncation split into long and
looping and the share cut off inside the thinking, request errors, the energy the job
has used, goodput and the tokens continuing truncated answers did not decode again."""

from __future__ import annotations

from rich.text import Text

from supervisor.client.text import duration, si
from supervisor.contract.status import Status
from tui.formatting import count, percent
from tui.goodput_style import goodput_style
from tui.text_flow import figure, flow
from tui.widgets.status_text import StatusText


class JobProgress(StatusText):
    def text(self, width: int) -> Text:
        s = self.status
        if s is None:
            return Text(" waiting for the daemon's first status…", style="dim")
        return Text("\n").join([self._bar_line(s, width), self._rates_line(s, width)])

    def _bar_line(self, s: Status, width: int) -> Text:
        j = s.job
        frac = j.done / j.total if j.total else 0.0
        tail = Text(f" {j.done:,}/{j.total:,} {100 * frac:5.1f}%  ETA ")
        if j.finished:
            tail.append("done", style="bold green")
        elif s.eta.held:
            # Nothing is generated: a countdown from the last rate would be false.
            tail.append(f"on hold ({s.eta.held})", style="bold yellow")
        else:
            tail.append(duration(s.eta.seconds, "?"), style="bold")
            if s.eta.low_s is not None and s.eta.high_s is not None:
                tail.append(f" ({duration(s.eta.low_s)}–{duration(s.eta.high_s)})", style="dim")
            if s.eta.warming_up:
                tail.append(" (warming up)", style="yellow")
        bar_width = max(10, width - tail.cell_len - 2)
        filled = frac * bar_width
        whole = int(filled)
        bar = Text(" ")
        bar.append("━" * whole, style="green")
        if whole < bar_width:
            bar.append("╸" if filled - whole >= 0.5 else "━",
                       style="green" if filled - whole >= 0.5 else "grey30")
            bar.append("━" * (bar_width - whole - 1), style="grey30")
        return bar + tail

    def _rates_line(self, s: Status, width: int) -> Text:
        r, q = s.rates, s.quality
        cells = [
            figure(f"{r.req_per_s:.1f}", "req/s"),
            figure(count(round(r.tok_per_s)), "tok/s"),
            figure(count(round(r.avg_output_tokens)), "avg", label_first=True),
            figure(percent(q.truncation_rate), "trunc", label_first=True,
                   style="bold yellow" if q.truncation_rate > 0.1 else None),
            *self._thinking_cells(s),
            *self._loop_cells(s),
            figure(percent(q.bad_rate), "bad", label_first=True,
                   style="bold red" if q.bad_rate > 0.05 else None),
            figure(f"{s.job.failed:,}", "failed", label_first=True,
                   style="bold red" if s.job.failed else None),
            *self._error_cells(s),
            *([figure(f"{s.quality.stalled_total:,}", "stalled", label_first=True,
                      style="bold yellow")] if s.quality.stalled_total else []),
            figure(f"{s.max_tokens:,}", "max tokens", label_first=True),
            *self._energy_cells(s),
            *self._waste_cells(s),
        ]
        return flow(cells, width)

    @staticmethod
    def _waste_cells(s: Status) -> list[Text]:
        w = s.waste
        if w is None or w.goodput is None:
            return []
        # Goodput: the kept share of every token generated (the rest was thrown away:
        # loops, stalls, retries, crashes, requeues; by cause in `dflash-supervisor status`).
        # One cell, so the line still fits 100 columns. Yellow under 90%, red under 75%.
        cells = [figure(f"{100 * w.goodput:.1f}%", "goodput", label_first=True,
                        style=goodput_style(w.goodput))]
        top = max(w.causes, key=lambda c: c.tokens, default=None)
        if top is not None and top.tokens and w.wasted_tokens:
            # Goodput falls at once when a requeue throws away the old answers' tokens:
            # the cause that lost the most says why, beside it.
            cells.append(figure(f"{top.cause} {100 * top.tokens / w.wasted_tokens:.0f}%",
                                "lost to", label_first=True))
        if w.continued_tokens:
            # Tokens continuation did not decode again (answers continued from their stored
            # tokens after a raise): not generated, so goodput does not count them.
            cells.append(figure(f"{si(w.continued_tokens)} tok", "continued", label_first=True,
                                style="bold green"))
        pending = s.continuation.pending if s.continuation is not None else 0
        if pending:
            cells.append(figure(f"{pending:,}", "continuing", label_first=True))
        return cells

    @staticmethod
    def _thinking_cells(s: Status) -> list[Text]:
        q = s.quality
        if not q.thinking_truncated_rate:
            return []
        # Cut off inside the thinking: no answer at all (content empty). Red from half the
        # share that pauses the job: the thinking budget is too small for max tokens.
        limit = q.max_thinking_truncated_rate or 1.0
        rate = q.thinking_truncated_rate
        return [figure(percent(rate), "in thinking", label_first=True,
                       style="bold red" if rate >= limit / 2 else
                       "bold yellow" if rate > 0.02 else None)]

    @staticmethod
    def _error_cells(s: Status) -> list[Text]:
        b = s.breaker
        if b is None or not b.error_rate:
            return []
        # Request errors over the breaker's window; red from half its threshold.
        return [figure(percent(b.error_rate), "errors", label_first=True,
                       style="bold red" if b.error_rate >= b.threshold / 2 else "bold yellow")]

    @staticmethod
    def _loop_cells(s: Status) -> list[Text]:
        q = s.quality
        if not q.loop_rate:
            return []
        # Loops are the truncation a higher max tokens does not fix.
        cells = [figure(percent(q.loop_rate), "loop", label_first=True,
                        style="bold yellow" if q.loop_rate > 0.02 else None)]
        if q.loops_aborted_total:
            # Stopped while they ran: the GPU time a loop would have burnt to max tokens.
            cells.append(figure(f"{q.loops_aborted_total:,}", "stopped", label_first=True))
        return cells

    @staticmethod
    def _energy_cells(s: Status) -> list[Text]:
        e = s.energy
        if e is None or e.kwh_so_far is None:
            return []
        so_far = f"{e.kwh_so_far:,.1f}"
        if e.kwh_projected is not None:
            so_far += f"/{e.kwh_projected:,.0f}"
        cells = [figure(so_far, "kWh")]
        if e.joules_per_token is not None:
            cells.append(figure(f"{e.joules_per_token:.2f}", "J/tok"))
        return cells
