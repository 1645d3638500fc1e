"""Loops caught while the model still writes them: a watcher fed each streamed delta.

`loop_detector` judges an answer once it is over, after the loop has burnt the whole budget.
`StreamLoopWatch` reads the stream instead, so a loop can be aborted a few hundred tokens
after it started. Per request, the caller makes one watcher and, for each streamed chunk:

    verdict = watch.feed(delta.get("reasoning_content"), delta.get("content"),
                         generated_tokens=usage_completion_tokens_or_None)
    if verdict is not None: abort the request, flag it `loop`, count
                            max_tokens - verdict.tokens as saved

The thinking trace and the answer are watched apart (each has its own tail): a model that
looped while thinking and then broke out of it into a clean answer is two texts, and a loop
must not be stitched across the boundary.

Cost: each part keeps its last TAIL_CHARS characters, raw and with numbers folded (below),
and looks at them once every CHECK_CHARS new characters, at fixed positions of the part's
text, so the verdict does not depend on how the stream was cut into chunks. A check is a
find and a compare in C, so the per-chunk cost is O(chunk) plus O(TAIL_CHARS / CHECK_CHARS)
per character, and memory is bounded whatever the answer length.

A loop is confirmed when the folded tail's last characters recur at some distance d (the
period) and the last max(MIN_RUN_CHARS, d) characters equal the ones d earlier: at least
two whole copies and a kilobyte of exact repetition (a short passage, then, many times).
Numbers standing alone are folded to "0", as `loop_detector` folds digits, so "Step 41: ...
Step 42: ..." is the same text again; but digits inside a name stay (`kv_1`, `bfloat16`,
`L2`), so unrolled code is not one text. A loop that varies a little from copy to copy is
confirmed word by word instead: three copies at least, and over at least NEAR_WORDS words,
nine words in ten the same as one period before (`exact=False` in the verdict).

Guards keep text that repeats in *shape* only (numbered lists, tables, code, repeated
headings, "Step 1... Step 2...") from counting:
- the repeated passage must be mostly letters, so a table of numbers or a rule of dashes
  never counts;
- the numbers a loop carries must be counters: each one equal to the same number one period
  earlier, or moving by the same step as it did the period before (12., 13., 14.); with only
  two copies, the same or one more. A table or a list of configurations whose values differ
  is not a loop, and is not tried as a loop that varies either.
`loop_detector`'s statistical measures (6-gram share, compression) are not used mid-stream:
on real source files they reach the values of a loop that varies a little (0.68 share, 0.09
ratio on SGLang's own code), so acting on them would abort good answers; aligned word
matches do not (none in SGLang's ~5,000 source files, see benchmarks/bench_loop_watch.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PARTS = ("reasoning", "content")
CHECK_CHARS = 1024           # a part's tail is checked every this many new characters
TAIL_CHARS = 32768           # kept per part: room for a few copies of a ~10 KB period
PROBE_CHARS = 32             # the end of the tail, looked up earlier in the tail
CANDIDATES = 4               # earlier occurrences of the probe tried as the period
COPIES = 2                   # copies of the passage needed, at least
MIN_RUN_CHARS = 1024         # exact repetition needed, whatever the period
LETTER_SHARE = 0.4           # of the passage's visible characters: letters
COUNTER_SHARE = 0.9          # of the numbers in the repetition: counters or constants
NEAR_WORDS = 400             # a loop that varies: words compared with a period before
NEAR_SHARE = 0.9             # of them the same word
MAX_HELD_DIGITS = 64         # a digit run longer than this is folded without its context
SNIPPET_CHARS = 200
CHARS_PER_TOKEN = 4          # the token estimate when the caller has no count
# A digit run that does not continue a word: a number, not part of a name like kv_1.
NUMBER = re.compile(r"(?<!\w)\d+")


@dataclass(frozen=True)
class LoopVerdict:
    part: str                # "reasoning" or "content"
    period_chars: int        # length of the repeated passage (numbers folded)
    snippet: str             # the passage, numbers folded to 0, at most SNIPPET_CHARS
    tokens: int              # tokens generated (both parts) when the loop was confirmed
    chars: int               # characters of that part read when it was confirmed
    exact: bool = True       # False: a loop that varies a little (most words the same)


@dataclass
class NumberFolder:
    """Folds numbers piece by piece as `NUMBER.sub("0", whole_text)` would: a trailing run
    of digits is held back until the next piece shows where it ends."""
    before: str = ""         # the last character emitted (context for the lookbehind)
    held: str = ""           # trailing digits not folded yet

    def fold(self, piece: str) -> str:
        text = self.held + piece
        k = len(text)
        while k > 0 and text[k - 1].isdecimal() and len(text) - k <= MAX_HELD_DIGITS:
            k -= 1
        if len(text) - k > MAX_HELD_DIGITS:
            k = len(text)    # a runaway digit run: fold what came so far, context or not
        body, self.held = text[:k], text[k:]
        if not body:
            return ""
        out = NUMBER.sub("0", self.before + body)[len(self.before):]
        self.before = body[-1]
        return out


def find_period(tail: str) -> int:
    """The period d (characters) of an exact repetition ending the tail and covering at
    least max(MIN_RUN_CHARS, (COPIES - 1) d) characters plus one period before them; 0 if
    none."""
    n = len(tail)
    if n < MIN_RUN_CHARS + PROBE_CHARS:
        return 0
    probe = tail[-PROBE_CHARS:]
    end = n - 1
    for _ in range(CANDIDATES):
        pos = tail.rfind(probe, 0, end)
        if pos < 0:
            return 0
        d = n - PROBE_CHARS - pos
        need = max(MIN_RUN_CHARS, (COPIES - 1) * d)
        if need + d > n:
            return 0                     # farther occurrences only give longer periods
        if tail[n - need - d:n - d] == tail[n - need:]:
            return d
        end = pos + PROBE_CHARS - 1
    return 0


def find_near_period(tail: str) -> tuple[int, int] | None:
    """A loop that varies a little from copy to copy: (its period, the characters compared)
    when, over the tail's last max(NEAR_WORDS, 2 p) words, at least NEAR_SHARE of the words
    equal the word p before (p, the period in words): three copies at least, since code
    holds near twins (two blocks alike but for a few names). Words, not characters: a word changed
    for another of a different length keeps the words aligned. The compared words must be
    mostly letters. The period comes from the probe's previous occurrence, as for an exact
    loop; None if there is none or the words do not match."""
    n = len(tail)
    pos = tail.rfind(tail[-PROBE_CHARS:], 0, n - 1)
    if pos < 0:
        return None
    d = n - PROBE_CHARS - pos
    after = tail[pos + PROBE_CHARS:]
    p = len(after.split())
    if p == 0:
        return None
    # Split only as much of the tail as the comparison needs, at the probe's word length.
    want = max(NEAR_WORDS, 2 * p) + p + 2
    region = max(PROBE_CHARS, int(want * max(d, 1) / p * 1.5))
    words = tail[-region:].split()[1:]           # the first one may be cut
    if len(words) < want and region < n:
        words = tail.split()[1:]
    for period in (p, p - 1):                    # a probe ending inside a word counts one more
        span = max(NEAR_WORDS, 2 * period)       # three copies: near twins are not loops
        if period <= 0 or span + period > len(words):
            continue
        last, before = words[-span:], words[-span - period:-period]
        same = sum(a == b for a, b in zip(last, before))
        if same >= NEAR_SHARE * span and mostly_letters("".join(last)):
            chars = len(" ".join(words[-span - period:]))
            return d, chars
    return None


def mostly_letters(passage: str) -> bool:
    visible = [c for c in passage if not c.isspace()]
    return bool(visible) and sum(c.isalpha() for c in visible) >= LETTER_SHARE * len(visible)


def numbers_are_counters(numbers: list[int], per_period: int) -> bool:
    """Whether the numbers of a repetition (`per_period` of them in each copy) are
    constants or counters: each moves by the step it moved by one period before."""
    m = per_period
    if m == 0 or len(numbers) < 2 * m:
        return True                      # nothing to tell a table from a loop by
    if len(numbers) < 3 * m:
        # Two copies show no step yet: each number the same again, or one more (a count).
        same = sum(numbers[i] - numbers[i - m] in (0, 1) for i in range(m, len(numbers)))
        return same >= COUNTER_SHARE * (len(numbers) - m)
    checked = len(numbers) - 2 * m
    steady = sum(numbers[i] - numbers[i - m] == numbers[i - m] - numbers[i - 2 * m]
                 for i in range(2 * m, len(numbers)))
    return steady >= COUNTER_SHARE * checked


@dataclass
class _Part:
    """One part's bounded state: its tails and the raw text since the last check (folded
    at the check, a block at a time, so a chunk costs an append)."""
    name: str
    tail: str = ""                   # folded
    raw: str = ""
    pending: list[str] = field(default_factory=list)
    since: int = 0                   # raw characters since the last check
    chars: int = 0                   # raw characters read in all
    folder: NumberFolder = field(default_factory=NumberFolder)

    def read(self, text: str, tokens: int | None, chars_before: int) -> LoopVerdict | None:
        """`tokens`: the caller's count for this chunk; else estimated from `chars_before`,
        the characters of both parts read before this text."""
        n = len(text)
        if self.since + n < CHECK_CHARS:             # the common case: no check due
            self.pending.append(text)
            self.since += n
            self.chars += n
            return None
        start = self.chars
        while text:
            take = CHECK_CHARS - self.since
            piece, text = text[:take], text[take:]
            self.pending.append(piece)
            self.since += len(piece)
            self.chars += len(piece)
            if self.since >= CHECK_CHARS:
                self.since = 0
                at = tokens if tokens is not None else \
                    (chars_before + self.chars - start) // CHARS_PER_TOKEN
                verdict = self._check(at)
                if verdict is not None:
                    return verdict
        return None

    def _check(self, tokens: int) -> LoopVerdict | None:
        block = "".join(self.pending)
        self.pending.clear()
        self.tail = (self.tail + self.folder.fold(block))[-TAIL_CHARS:]
        self.raw = (self.raw + block)[-TAIL_CHARS:]
        tail = self.tail
        d = find_period(tail)
        if d:
            # An exact repetition that is a table or a rule is not tried as a near one.
            run = max(MIN_RUN_CHARS, (COPIES - 1) * d) + d
            if mostly_letters(tail[-max(d, PROBE_CHARS):]) and self._counting(run, d):
                return LoopVerdict(self.name, d, tail[-d:][:SNIPPET_CHARS], tokens,
                                   self.chars, exact=True)
            return None
        near = find_near_period(tail)
        if near is None:
            return None
        d, run = near
        if not self._counting(run, d):
            return None
        return LoopVerdict(self.name, d, tail[-d:][:SNIPPET_CHARS], tokens, self.chars,
                           exact=False)

    def _counting(self, run: int, d: int) -> bool:
        """Whether the numbers in the tail's last `run` characters (period `d`) count."""
        tail, n = self.tail, len(self.tail)
        in_run = sum(1 for _ in NUMBER.finditer(tail, max(0, n - run)))
        per_period = sum(1 for _ in NUMBER.finditer(tail, n - d))
        # The run's numbers as written: the last ones of the raw tail (the folder holds
        # back a trailing digit run, so the raw tail may end with one more number).
        raw_numbers = [int(x[-18:]) for x in NUMBER.findall(self.raw)]
        held = len(self.folder.held)
        if held and NUMBER.match(self.raw, len(self.raw) - held):
            raw_numbers = raw_numbers[:-1]
        return numbers_are_counters(raw_numbers[-in_run:] if in_run else [], per_period)

    def kept_chars(self) -> int:
        return (len(self.tail) + len(self.raw) + sum(len(p) for p in self.pending)
                + len(self.folder.held))


class StreamLoopWatch:
    """One request's loop watch. `feed` each streamed delta; the first confirmed loop is
    returned (then and on every later call) and nothing more is read."""

    def __init__(self) -> None:
        self._parts = {name: _Part(name) for name in PARTS}
        self._reasoning, self._content = self._parts["reasoning"], self._parts["content"]
        self._tokens = 0                 # generated tokens read so far
        self._chars = 0                  # raw characters of both parts read so far
        self._counted = False            # the caller gives token counts
        self.verdict: LoopVerdict | None = None

    @property
    def tokens(self) -> int:
        """Generated tokens read so far (the caller's count, or an estimate)."""
        return self._tokens

    def feed(self, reasoning: str | None = None, content: str | None = None, *,
             generated_tokens: int | None = None) -> LoopVerdict | None:
        """One streamed chunk: its reasoning and answer deltas (None or "" when absent) and,
        when the server reports it (SGLang's stream_options.continuous_usage_stats), the
        completion tokens generated so far including this chunk. Without a count, tokens are
        estimated at CHARS_PER_TOKEN characters each."""
        if self.verdict is not None:
            return self.verdict
        # Called per streamed chunk (a chunk per token at SGLang's default stream
        # interval): plain class checks and the two parts by name, no loop or tuple.
        if generated_tokens is not None and (generated_tokens.__class__ is bool
                                             or generated_tokens < 0):
            raise ValueError(f"generated_tokens must be an int >= 0, got {generated_tokens!r}")
        verdict = None
        if reasoning:
            if reasoning.__class__ is not str and not isinstance(reasoning, str):
                raise TypeError(f"reasoning delta must be a string, got "
                                f"{type(reasoning).__name__}")
            verdict = self._reasoning.read(reasoning, generated_tokens, self._chars)
            self._chars += len(reasoning)
        if content and verdict is None:
            if content.__class__ is not str and not isinstance(content, str):
                raise TypeError(f"content delta must be a string, got "
                                f"{type(content).__name__}")
            verdict = self._content.read(content, generated_tokens, self._chars)
            self._chars += len(content)
        if generated_tokens is not None:
            self._counted = True
            if generated_tokens > self._tokens:
                self._tokens = generated_tokens
        elif not self._counted:
            self._tokens = self._chars // CHARS_PER_TOKEN
        if verdict is not None:
            self.verdict = verdict
            self._tokens = max(self._tokens, verdict.tokens)
        return verdict

    def kept_chars(self) -> int:
        """Characters held, both parts together: at most
        2 (2 TAIL_CHARS + CHECK_CHARS + MAX_HELD_DIGITS + 1)."""
        return sum(p.kept_chars() for p in self._parts.values())
