"""Taking a shard that is already in the output back into a restored state DB.

A state backup is a few minutes old when its node is lost; shards uploaded after it are in
the output but their results are not in the backup. Regenerating those prompts would replace
uploaded lines with new ones (the same prompts, other answers): instead the shard's lines
are read back and recorded as the results, in that shard, uploaded. The line format holds
every field a line is built from, so the shard rebuilt from the DB has the same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from state.records import ShardLine
from state.store import Store


class AdoptionError(RuntimeError):
    """The shard cannot be taken in without breaking exactly-once; the message says why."""


@dataclass(frozen=True)
class UploadedShard:
    seq: int
    key: str
    bytes: int
    sha256: str
    md5: str
    etag: str | None


def adopt_shard(store: Store, shard: UploadedShard, lines: Sequence[ShardLine]) -> int:
    """Record `lines` as the results of shard `shard.seq`, uploaded. One transaction.
    Returns how many prompts changed status to done."""
    now = time.time()
    ids = [line.id for line in lines]
    with store._tx(durable=True) as conn:
        row = conn.execute("SELECT key FROM shards WHERE id = ?", (shard.seq,)).fetchone()
        if row is not None and row[0] != shard.key:
            raise AdoptionError(f"{shard.key}: the DB's shard {shard.seq} is {row[0]}")
        known = {r[0]: (r[1], r[2]) for r in conn.execute(
            "SELECT id, status, shard_id FROM prompts WHERE id IN "
            "(SELECT value FROM json_each(?))", (_json(ids),))}
        strangers = [i for i in ids if i not in known]
        if strangers:
            raise AdoptionError(f"{shard.key}: {len(strangers)} ids are not in this node's "
                                f"prompts (e.g. {strangers[0]}): another prompt file?")
        elsewhere = [i for i, (_, sid) in known.items() if sid not in (None, shard.seq)]
        if elsewhere:
            raise AdoptionError(f"{shard.key}: {elsewhere[0]} is already in shard "
                                f"{known[elsewhere[0]][1]}")
        if row is None:
            conn.execute("INSERT INTO shards (id, key, status, assigned_at) "
                         "VALUES (?, ?, 'assigned', ?)", (shard.seq, shard.key, now))
        # Members the DB had for this shard but the object does not hold stay done, unsharded.
        conn.execute("UPDATE prompts SET shard_id = NULL WHERE shard_id = ? AND id NOT IN "
                     "(SELECT value FROM json_each(?))", (shard.seq, _json(ids)))
        moved: dict[str, int] = {}
        for line in lines:
            status = known[line.id][0]
            if status != "done":
                moved[status] = moved.get(status, 0) + 1
            c = line.completion
            conn.execute(
                "UPDATE prompts SET status = 'done', content = ?, reasoning_content = ?, "
                "finish_reason = ?, prompt_tokens = ?, completion_tokens = ?, "
                "reasoning_tokens = ?, max_tokens = ?, model = ?, server = ?, attempts = ?, "
                "finished_at = ?, loop = ?, error = NULL, shard_id = ? WHERE id = ?",
                (c.content, c.reasoning_content, c.finish_reason, c.prompt_tokens,
                 c.completion_tokens, c.reasoning_tokens, line.max_tokens, line.model,
                 line.server, line.attempts, line.finished_at,
                 None if line.loop is None else int(line.loop), shard.seq, line.id))
        for status, n in moved.items():
            Store._move(conn, status, "done", n)
        conn.execute(
            "UPDATE shards SET status = 'uploaded', records = ?, bytes = ?, sha256 = ?, md5 = ?, "
            "etag = ?, checksum = ?, written_at = coalesce(written_at, ?), uploaded_at = ?, "
            "version = version + 1, last_error = NULL WHERE id = ?",
            (len(lines), shard.bytes, shard.sha256, shard.md5, shard.etag,
             f"sha256:{shard.sha256}", now, now, shard.seq))
    return sum(moved.values())


def _json(ids: Sequence[str]) -> str:
    import json
    return json.dumps(list(ids))
