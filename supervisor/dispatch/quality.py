"""The quality gate: every completion is checked as it arrives, and a window of bad ones
pauses the job.

The incident this exists for: 87% of a 914K-sample dataset was empty responses and nobody
looked until training. Checking each completion is cheap; pausing early saves the GPU-day.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

# Checks whose failure makes a completion "bad". Truncation is tracked separately: a
# truncated answer is often still wanted (and can be re-run at a higher limit).
EMPTY_CONTENT = "empty_content"
MISSING_REASONING = "missing_reasoning"
THINK_MARKERS = "think_markers"
TRUNCATED = "truncated"
# A truncated answer whose tail repeats itself (loop_detector.py): a degenerate loop, which
# a re-run at a higher limit only makes longer. Always comes with TRUNCATED.
LOOP = "loop"
# Cut off inside the thinking: finish_reason length, content empty, all text in reasoning.
# No answer at all, unlike a cut in the answer; a job full of these (the "87% empty answers"
# incident) has a thinking budget too small for its max_tokens. Always comes with TRUNCATED.
THINKING_TRUNCATED = "thinking_truncated"
_NOT_BAD = (TRUNCATED, LOOP, THINKING_TRUNCATED)

_MARKERS = ("<think>", "</think>")


@dataclass(frozen=True)
class Verdict:
    problems: tuple[str, ...]   # every check that failed, TRUNCATED (and LOOP) included

    @property
    def bad(self) -> bool:
        return any(p not in _NOT_BAD for p in self.problems)

    @property
    def truncated(self) -> bool:
        return TRUNCATED in self.problems

    @property
    def looping(self) -> bool:
        return LOOP in self.problems

    @property
    def in_thinking(self) -> bool:
        return THINKING_TRUNCATED in self.problems


def check_completion(content: str, reasoning: str | None, finish_reason: str,
                     thinking: bool, loop: bool = False) -> Verdict:
    """`loop`: the loop detector's verdict on this answer (only a truncated one can loop)."""
    problems: list[str] = []
    truncated = finish_reason == "length"
    if truncated:
        problems.append(TRUNCATED)
        if loop:
            problems.append(LOOP)
    # Cut off inside the thinking part: SGLang puts all text in reasoning_content and leaves
    # content empty (its reasoning parser never saw </think>). That is truncation, counted
    # apart from a cut in the answer, not an empty answer.
    in_thinking = truncated and not content.strip() and bool((reasoning or "").strip())
    if in_thinking:
        problems.append(THINKING_TRUNCATED)
    if not content.strip() and not (in_thinking and thinking):
        problems.append(EMPTY_CONTENT)
    if thinking and not (reasoning or "").strip():
        problems.append(MISSING_REASONING)
    # A marker left in either field means the reasoning parser did not split the output
    # (wrong --reasoning-parser, or thinking not actually enabled in the chat template).
    if any(m in content for m in _MARKERS) or any(m in (reasoning or "") for m in _MARKERS):
        problems.append(THINK_MARKERS)
    return Verdict(tuple(problems))


@dataclass(frozen=True)
class QualitySnapshot:
    samples: int                 # completions in the window
    bad_rate: float
    truncation_rate: float       # long_rate + loop_rate; thinking_truncated + answer_truncated
    problems: dict[str, int]     # per check, within the window
    checked_total: int
    bad_total: int
    truncated_total: int
    tripped: str | None          # why dispatch should pause, if it should
    loop_rate: float = 0.0       # truncated and looping
    long_rate: float = 0.0       # truncated, not looping: worth a re-run at a higher limit
    loop_total: int = 0
    # Truncated inside the thinking (no answer began) and truncated in the answer.
    thinking_truncated_rate: float = 0.0
    answer_truncated_rate: float = 0.0
    thinking_truncated_total: int = 0


class QualityGate:
    """Rolling rates over the last `window` completions; trips once the window holds at
    least `min_samples` and the bad share (or truncation share, or loop share) passes its
    threshold."""

    def __init__(self, window: int, min_samples: int, max_bad_rate: float,
                 max_truncation_rate: float = 1.0, max_loop_rate: float = 1.0,
                 max_thinking_truncated_rate: float = 1.0) -> None:
        self.window = window
        self.min_samples = min_samples
        self.max_bad_rate = max_bad_rate
        self.max_truncation_rate = max_truncation_rate
        self.max_loop_rate = max_loop_rate
        self.max_thinking_truncated_rate = max_thinking_truncated_rate
        self._recent: deque[Verdict] = deque(maxlen=window)
        self._problems: Counter[str] = Counter()
        self._bad = 0
        self._truncated = 0
        self._loops = 0
        self._in_thinking = 0
        self.checked_total = 0
        self.bad_total = 0
        self.truncated_total = 0
        self.loop_total = 0
        self.thinking_truncated_total = 0

    def observe(self, verdict: Verdict) -> str | None:
        """Add one completion; returns the reason to pause when the gate trips now."""
        if len(self._recent) == self.window:
            self._forget(self._recent[0])
        self._recent.append(verdict)
        self._problems.update(verdict.problems)
        self._bad += verdict.bad
        self._truncated += verdict.truncated
        self._loops += verdict.looping
        self._in_thinking += verdict.in_thinking
        self.checked_total += 1
        self.bad_total += verdict.bad
        self.truncated_total += verdict.truncated
        self.loop_total += verdict.looping
        self.thinking_truncated_total += verdict.in_thinking
        return self.tripped()

    def _forget(self, old: Verdict) -> None:
        self._problems.subtract(old.problems)
        self._bad -= old.bad
        self._truncated -= old.truncated
        self._loops -= old.looping
        self._in_thinking -= old.in_thinking

    def reset(self) -> None:
        """Forget the window (an operator resumed after fixing the cause)."""
        self._recent.clear()
        self._problems.clear()
        self._bad = self._truncated = self._loops = self._in_thinking = 0

    def tripped(self) -> str | None:
        n = len(self._recent)
        if n < self.min_samples:
            return None
        bad_rate, trunc_rate = self._bad / n, self._truncated / n
        if bad_rate > self.max_bad_rate:
            worst = ", ".join(f"{k} {v}" for k, v in self._problems.most_common()
                              if k not in _NOT_BAD and v > 0)
            return (f"bad output: {bad_rate:.0%} of the last {n} completions "
                    f"(threshold {self.max_bad_rate:.0%}): {worst}")
        loop_rate = self._loops / n
        if loop_rate > self.max_loop_rate:
            return (f"degenerate loops: {loop_rate:.0%} of the last {n} completions ran into "
                    f"max_tokens repeating themselves (threshold {self.max_loop_rate:.0%})")
        thinking_rate = self._in_thinking / n
        if thinking_rate > self.max_thinking_truncated_rate:
            return (f"truncated inside the thinking: {thinking_rate:.0%} of the last {n} "
                    f"completions hit max_tokens before any answer began (threshold "
                    f"{self.max_thinking_truncated_rate:.0%}): raise max_tokens or shorten "
                    f"the thinking")
        if trunc_rate > self.max_truncation_rate:
            return (f"truncation: {trunc_rate:.0%} of the last {n} completions hit max_tokens "
                    f"(threshold {self.max_truncation_rate:.0%})")
        return None

    def snapshot(self) -> QualitySnapshot:
        n = len(self._recent)
        return QualitySnapshot(
            samples=n,
            bad_rate=self._bad / n if n else 0.0,
            truncation_rate=self._truncated / n if n else 0.0,
            problems={k: v for k, v in self._problems.items() if v > 0},
            checked_total=self.checked_total, bad_total=self.bad_total,
            truncated_total=self.truncated_total, tripped=self.tripped(),
            loop_rate=self._loops / n if n else 0.0,
            long_rate=(self._truncated - self._loops) / n if n else 0.0,
            loop_total=self.loop_total,
            thinking_truncated_rate=self._in_thinking / n if n else 0.0,
            answer_truncated_rate=(self._truncated - self._in_thinking) / n if n else 0.0,
            thinking_truncated_total=self.thinking_truncated_total)
