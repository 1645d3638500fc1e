"""The store's records: what goes in (imports, outcomes) and what comes out (claims, counts,
shards, events). Frozen dataclasses, so a snapshot handed to another task cannot change under it.

Times are float unix seconds everywhere; the DB keeps the exact float (REAL) so a shard line
built from it is byte-for-byte the same every time it is rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PENDING = "pending"
IN_FLIGHT = "in_flight"
DONE = "done"
FAILED = "failed"
STATUSES = (PENDING, IN_FLIGHT, DONE, FAILED)

SHARD_ASSIGNED = "assigned"
SHARD_WRITTEN = "written"
SHARD_UPLOADED = "uploaded"


# -- in --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ImportRow:
    id: str
    messages: list[dict[str, Any]]
    source_line: int


@dataclass(frozen=True)
class Completion:
    """One generated answer as the server gave it: what a `Done` outcome records and what a
    shard line is built from (one record, so the fields are never copied by hand)."""
    content: str
    reasoning_content: str | None
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int


@dataclass(frozen=True)
class TokenIds:
    """An answer's exact tokens as SGLang sampled them (state/token_ids_table.py keeps them):
    the prompt as the chat template rendered it, every output id so far (all parts of a
    continued answer), and whether the last id left the model inside its thinking (a
    continuation's assistant message then opens `<think>`)."""
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    in_reasoning: bool
    parts: int = 1


@dataclass(frozen=True)
class StoredAnswer:
    """What a continuation starts from: the stored ids and the counts of the answer they
    make, so the finished parts add up without asking the server."""
    ids: TokenIds
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    max_tokens: int              # the limit the stored part was cut off at


@dataclass(frozen=True)
class Done:
    """A completion (finish_reason stop or length) and how it was produced."""
    id: str
    completion: Completion
    max_tokens: int
    model: str
    server: str
    started_at: float
    finished_at: float
    loop: bool = False           # truncated, and its tail repeats itself
    # The exact tokens to keep for it (None: none kept; any stored earlier are dropped).
    tokens: TokenIds | None = None
    # Output tokens the last part started from, when it continued a stored answer.
    continued_from: int | None = None
    # Back to pending at once, to be continued from `tokens` (cut off under a limit that was
    # raised with continue while it ran).
    continue_now: bool = False


@dataclass(frozen=True)
class Retry:
    """A transient failure: back to pending, or failed once attempts reach max_attempts."""
    id: str
    error: str
    max_attempts: int


@dataclass(frozen=True)
class Failed:
    """A permanent failure (e.g. HTTP 400: the prompt is longer than the context)."""
    id: str
    error: str


@dataclass(frozen=True)
class Requeue:
    """The server went away under the request: pending again, no attempt counted."""
    id: str


Outcome = Done | Retry | Failed | Requeue


# -- out -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClaimedPrompt:
    id: str
    messages: list[dict[str, Any]]
    attempts: int
    # The claim's stamp, kept in the row's started_at while it is in flight: with the id and
    # the attempt it makes the request id, so a later daemon can name (and abort) on the
    # server what an earlier one had in flight when it died (InFlightClaim).
    claimed_at: float = 0.0
    # Set when the prompt goes out as a continuation of its stored answer.
    stored: StoredAnswer | None = None


@dataclass(frozen=True)
class InFlightClaim:
    """A prompt in flight when the daemon started: whoever sent it is gone."""
    id: str
    attempts: int
    server: str | None
    claimed_at: float


@dataclass(frozen=True)
class StatusCounts:
    pending: int = 0
    in_flight: int = 0
    done: int = 0
    failed: int = 0

    @property
    def total(self) -> int:
        return self.pending + self.in_flight + self.done + self.failed

    @property
    def finished(self) -> bool:
        """Nothing left to dispatch or wait for."""
        return self.pending == 0 and self.in_flight == 0


@dataclass(frozen=True)
class TruncationCounts:
    """Done answers cut off at their max tokens: merely long, or looping; and of either,
    those cut off inside the thinking (blank answer, all text in the reasoning)."""
    long: int = 0
    looping: int = 0
    in_thinking: int = 0

    @property
    def truncated(self) -> int:
        return self.long + self.looping


@dataclass(frozen=True)
class Shard:
    id: int
    key: str
    status: str
    records: int
    bytes: int
    sha256: str | None
    md5: str | None
    etag: str | None
    checksum: str | None
    written_at: float | None
    uploaded_at: float | None
    upload_attempts: int
    last_error: str | None
    # Bumped every time the shard is (re)assigned: a writer that read the lines before a
    # regenerated result landed must not mark the newer assignment written.
    version: int = 1


@dataclass(frozen=True)
class ShardLine:
    """Everything one shard line needs (the writer owns the line's JSON shape): the prompt,
    its stored completion and how it was produced."""
    id: str
    messages: list[dict[str, Any]]
    completion: Completion
    max_tokens: int | None
    model: str | None
    server: str | None
    attempts: int
    finished_at: float | None
    loop: bool | None = None     # None: recorded before loops were checked
    continued_from: int | None = None   # output tokens the last part started from
    output_ids: tuple[int, ...] | None = None   # when the shard line carries them


@dataclass(frozen=True)
class Event:
    id: int
    time: float
    kind: str
    subject: str
    detail: dict[str, Any] = field(default_factory=dict)
    actor: str = ""


@dataclass(frozen=True)
class ServerProcess:
    """A server process group the daemon started; kept until it is known to be stopped."""
    name: str
    pid: int
    pgid: int
    argv: list[str]
    started_at: float
