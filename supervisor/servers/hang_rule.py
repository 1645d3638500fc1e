"""What "hung" means: requests in flight and no token from the server for `hang_timeout_s`.

Progress is tokens, never completions: a long thinking answer takes many minutes, and when
every answer on a server is longer than the timeout, a rule on completions restarts a
healthy server forever and finishes nothing. The token signals, read each tick:

- the latest token any of its streamed requests produced (dispatch/stream_deadlines.py);
- SGLang's own per-decode-step counter `sglang:realtime_tokens_total{mode="decode"}` from
  /metrics (sglang_monitor.py), which moves whatever the client streams.

Where neither exists (dispatch.stream off, and no /metrics, or only SGLang's per-finished-
request counter), completions are all there is. Then the timeout is derived from the longest
answer we ask for: `max_tokens / the measured per-stream speed`, times HANG_MARGIN, and never
less than hang_timeout_s; before any speed is measured, dispatch.request_timeout_s (a request
that outlasts it is retried anyway, which counts as movement).

Measured from when the server was first seen busy: a job paused for an hour does not look
hung the moment work resumes.
"""

from __future__ import annotations

from dataclasses import dataclass

# The derived timeout's margin over the longest answer at the measured speed: speeds vary
# with the batch, and the estimate is an average.
HANG_MARGIN = 2.0


@dataclass(frozen=True)
class ProgressReading:
    """One tick's view of one server, in monotonic seconds."""
    in_flight: int
    token_at: float | None        # the latest token seen (streams or SGLang's counter)
    token_signal: bool            # a token signal exists (None above: no token yet)
    completed: int                # outcomes so far (the fallback signal)
    hung: str | None = None       # the dispatcher's own verdict (stall_watch.py)
    derived_timeout_s: float | None = None   # the completion rule's timeout, when used
    derived_from: str = ""        # how that timeout was reached, for the log line
    answered: int = 0             # answers completed in this READY life


@dataclass
class LifeProgress:
    """The span of one READY life's progress, and the answers it completed (said in the
    failure's event): a life that answered is not part of the unanswered count, one that
    served long not part of the brief-lives count (restart_policy.py)."""
    first_at: float | None = None
    last_at: float | None = None
    answered: int = 0

    def served(self, served_after_s: float) -> bool:
        """Its token progress lasted `served_after_s`: the brief-lives count starts again.
        Answers are counted apart (a scheduler that sticks once its first answers are out
        answers at every life, and only this span shows the loop)."""
        return self.span_s >= served_after_s

    def saw(self, at: float) -> None:
        if self.first_at is None or at < self.first_at:
            self.first_at = at
        if self.last_at is None or at > self.last_at:
            self.last_at = at

    @property
    def span_s(self) -> float:
        if self.first_at is None or self.last_at is None:
            return 0.0
        return self.last_at - self.first_at


class HangRule:
    """One per READY life, started when it became READY: signals older than that are the
    last life's."""

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at
        self._busy_since: float | None = None
        self._last_completed: int | None = None
        self._completed_at: float | None = None
        self.life = LifeProgress()

    def observe(self, r: ProgressReading, now: float, hang_timeout_s: float) -> str | None:
        """The hang reason, or None while the server is idle or making progress."""
        self.life.answered = max(self.life.answered, r.answered)
        if r.completed != self._last_completed:
            if self._last_completed is not None:
                self._completed_at = now
            self._last_completed = r.completed
        if r.token_signal:
            progress_at = r.token_at
            if progress_at is not None and progress_at < self.started_at:
                progress_at = None
            if progress_at is not None:
                self.life.saw(progress_at)
            timeout = hang_timeout_s
        else:
            progress_at = self._completed_at
            if progress_at is not None:
                self.life.saw(progress_at)
            timeout = max(hang_timeout_s, r.derived_timeout_s or 0.0)
        if r.in_flight == 0:
            self._busy_since = None
            return None
        if self._busy_since is None:
            self._busy_since = now
        since = self._busy_since if progress_at is None else max(self._busy_since, progress_at)
        silent = now - since
        if silent < timeout:
            return None
        if r.token_signal:
            return f"{r.in_flight} requests in flight, no token for {silent:.0f} s"
        return (f"{r.in_flight} requests in flight, none completed for {silent:.0f} s "
                f"(no token signal: timeout {timeout:.0f} s, {r.derived_from})")
