"""Shards whose output was found changed, and shards restored from the output into a new DB.

`reassign_shard`: a shard the DB calls written or uploaded whose file or object is missing or
holds other bytes goes back to 'assigned' (the writer rebuilds the same bytes from the rows,
the uploader sends them out again) and an event says which and why.

`restore_shard`: `rebuild-state` puts a shard read from the output back into an empty DB,
with every prompt in it done exactly as its line says, so a lost DB loses no finished work.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from state.connection import StoreConnection, dumps
from supervisor.contract.event_kinds import EventKind


@dataclass(frozen=True)
class RestoredLine:
    """One shard line, read back into the fields the DB keeps."""
    id: str
    messages: list[dict[str, Any]]      # the prompt (without the answer)
    content: str | None
    reasoning_content: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    reasoning_tokens: int | None
    max_tokens: int | None
    model: str | None
    server: str | None
    attempts: int
    finished_at: float | None
    loop: bool | None = None     # None: written before loops were checked
    continued_from: int | None = None   # the line says it was continued from its tokens


class ShardAudit(StoreConnection):
    """One of the query families Store is composed of."""

    def reassign_shard(self, shard_id: int, why: str, actor: str) -> bool:
        """Written/uploaded → assigned, with a `shard_mismatch` event. Returns whether the
        shard was reset (False when it had moved on already)."""
        with self._tx() as conn:
            got = conn.execute("SELECT key, status FROM shards WHERE id = ? "
                               "AND status IN ('written', 'uploaded')", (shard_id,)).fetchone()
            if got is None:
                return False
            conn.execute("UPDATE shards SET status = 'assigned', version = version + 1, "
                         "etag = NULL, checksum = NULL, last_error = ? WHERE id = ?",
                         (why, shard_id))
            conn.execute("INSERT INTO events (time, kind, subject, detail, actor) "
                         "VALUES (?, ?, ?, ?, ?)",
                         (time.time(), EventKind.SHARD_MISMATCH, got[0],
                          dumps({"why": why, "was": got[1]}), actor))
        return True

    def shard_keys(self) -> set[str]:
        return {r[0] for r in self._read("SELECT key FROM shards")}

    def restore_shard(self, shard_id: int, key: str, lines: Sequence[RestoredLine], *,
                      status: str, size: int, sha256: str, md5: str, etag: str | None,
                      now: float) -> None:
        """One shard and its prompts, as read from the output (one transaction). Prompts
        already imported become done with the line's result; others are added as done.
        status_counts is not kept in step here (a per-shard recount would make a rebuild
        quadratic): the caller runs `recount()` once at the end, under the job lock."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO shards (id, key, status, records, bytes, sha256, md5, etag, "
                "checksum, assigned_at, written_at, uploaded_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (shard_id, key, status, len(lines), size, sha256, md5, etag,
                 f"sha256:{sha256}" if status == "uploaded" else None, now, now,
                 now if status == "uploaded" else None))
            for ln in lines:
                conn.execute(
                    "INSERT INTO prompts (id, messages, status) VALUES (?, ?, 'pending') "
                    "ON CONFLICT (id) DO NOTHING", (ln.id, dumps(ln.messages)))
                conn.execute(
                    "UPDATE prompts SET status = 'done', messages = ?, content = ?, "
                    "reasoning_content = ?, finish_reason = ?, prompt_tokens = ?, "
                    "completion_tokens = ?, reasoning_tokens = ?, max_tokens = ?, model = ?, "
                    "server = ?, attempts = ?, finished_at = ?, loop = ?, started_at = NULL, "
                    "error = NULL, shard_id = ?, continued_from = ? WHERE id = ?",
                    (dumps(ln.messages), ln.content, ln.reasoning_content, ln.finish_reason,
                     ln.prompt_tokens, ln.completion_tokens, ln.reasoning_tokens, ln.max_tokens,
                     ln.model, ln.server, ln.attempts, ln.finished_at, ln.loop, shard_id,
                     ln.continued_from, ln.id))
