"""`dflash-supervisor import PROMPTS.jsonl --state PATH [--partition I/N]`

Streams a JSONL file into the state DB as pending prompts, batch by batch (memory stays flat
however big the file is). Each line is one prompt in one of these shapes:

- OpenAI:   {"id"?, "messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}
- ShareGPT: {"id"?, "conversations": [{"from": "human"|"gpt"|"system", "value": ...}, ...]}
            (turns written {"role": ..., "content": ...} are taken the same way)
- bare:     {"id"?, "prompt": "..."}
- MT-bench: {"question_id": 81, "turns": ["...", ...]} (the first turn is the prompt)

Trailing assistant turns are dropped: the prompt is everything up to the last user turn, and
the model writes the answer. The id is the line's `id` (or MT-bench `question_id`), else a
stable hash of the messages, so re-importing the same file inserts nothing new. Bad lines
(malformed JSON, non-UTF-8 bytes, missing or ill-typed fields) are reported with their line
number and skipped, whatever the parser's complaint. A UTF-8 byte-order mark is skipped. An id
already imported with other text is reported (count and first ids); `--reimport-changed` takes
the new text as new work for those ids. Exit status is non-zero only when the file yields
nothing usable.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from state.records import ImportRow
from state.store import Store
from supervisor.config import ConfigError, Partition

BATCH = 5000
MAX_ERRORS_KEPT = 100

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant",
                   "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
                   "bing": "assistant", "model": "assistant", "system": "system"}
_ROLES = {"system", "user", "assistant", "developer", "tool"}


class BadLine(ValueError):
    """A line that cannot become a prompt; the message says why."""


@dataclass
class ImportSummary:
    lines: int = 0
    imported: int = 0
    duplicates: int = 0
    rejected: int = 0
    other_partition: int = 0
    # Ids already imported whose text in the file is different now.
    changed: int = 0
    changed_ids: list[str] = field(default_factory=list)
    reimported: int = 0
    # (line number, reason) of the first MAX_ERRORS_KEPT rejected lines.
    errors: list[tuple[int, str]] = field(default_factory=list)

    @property
    def usable(self) -> int:
        """Prompts the file provides for this node (new or already imported)."""
        return self.imported + self.duplicates

    def __str__(self) -> str:
        text = (f"{self.imported} imported, {self.duplicates} duplicate, "
                f"{self.rejected} rejected")
        if self.other_partition:
            text += f", {self.other_partition} in other partitions"
        if self.changed:
            text += f", {self.changed} changed since imported"
        if self.reimported:
            text += f" ({self.reimported} re-imported as new work)"
        return text

    def changed_warning(self) -> str | None:
        """What an operator must hear about ids whose text changed, or None."""
        if not self.changed or self.reimported:
            return None
        more = "…" if self.changed > len(self.changed_ids) else ""
        return (f"{self.changed} prompt ids already imported have other text in the file now "
                f"(first: {', '.join(self.changed_ids)}{more}); their old text is kept. "
                "Re-import them as new work with `dflash-supervisor import FILE --state DB "
                "--reimport-changed`")


def stable_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def partition_of(prompt_id: str, count: int) -> int:
    """Which of `count` parts a prompt belongs to: a stable hash of its id, the same on
    every node and every run (Python's hash() is salted per process; this is not)."""
    return int.from_bytes(hashlib.sha256(prompt_id.encode("utf-8")).digest()[:8], "big") % count


def _content_ok(content: Any) -> bool:
    # A string, or OpenAI's list of content parts.
    return (isinstance(content, str) and content != "") or (
        isinstance(content, list) and bool(content) and all(isinstance(p, dict) for p in content))


def _from_messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise BadLine("'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise BadLine(f"messages[{i}] is not an object")
        role, content = m.get("role"), m.get("content")
        if role not in _ROLES:
            raise BadLine(f"messages[{i}].role must be one of {sorted(_ROLES)}, got {role!r}")
        if not _content_ok(content):
            raise BadLine(f"messages[{i}].content must be a non-empty string")
        out.append({"role": role, "content": content})
    return out


def _from_conversations(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise BadLine("'conversations' must be a non-empty list")
    out = []
    for i, turn in enumerate(raw):
        if not isinstance(turn, dict):
            raise BadLine(f"conversations[{i}] is not an object")
        # from/value is ShareGPT's own form; role/content is how SpecForge's regeneration
        # script and many re-exported datasets write the same turns.
        who_key, value_key = ("from", "value") if "from" in turn else ("role", "content")
        who, value = turn.get(who_key), turn.get(value_key)
        role = _SHAREGPT_ROLES.get(who) if isinstance(who, str) else None
        if role is None:
            raise BadLine(f"conversations[{i}].{who_key} {who!r} is not a known speaker")
        if not isinstance(value, str) or not value:
            raise BadLine(f"conversations[{i}].{value_key} must be a non-empty string")
        out.append({"role": role, "content": value})
    return out


def _from_turns(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], str) or not raw[0]:
        raise BadLine("'turns' must be a list whose first item is a non-empty string")
    return [{"role": "user", "content": raw[0]}]


def parse_prompt(obj: Any) -> tuple[str, list[dict[str, Any]]]:
    """(id, messages) for one decoded line, or BadLine."""
    if not isinstance(obj, dict):
        raise BadLine("line is not a JSON object")
    if "messages" in obj:
        messages = _from_messages(obj["messages"])
    elif "conversations" in obj:
        messages = _from_conversations(obj["conversations"])
    elif "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise BadLine("'prompt' must be a non-empty string")
        messages = [{"role": "user", "content": obj["prompt"]}]
    elif "turns" in obj:
        messages = _from_turns(obj["turns"])
    else:
        raise BadLine("no 'messages', 'conversations', 'prompt' or 'turns' field")
    while messages and messages[-1]["role"] == "assistant":
        messages.pop()
    if not any(m["role"] == "user" for m in messages):
        raise BadLine("no user turn to answer")
    raw_id = obj.get("id", obj.get("question_id"))
    if raw_id is None:
        prompt_id = "h-" + stable_hash(json.dumps(messages, ensure_ascii=False,
                                                  separators=(",", ":"), sort_keys=True))[:32]
    elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) and str(raw_id):
        prompt_id = str(raw_id)
    else:
        raise BadLine(f"'id' must be a non-empty string or an integer, got {raw_id!r}")
    return prompt_id, messages


BOM = "\ufeff"


def _decode_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadLine(f"malformed JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise BadLine("JSON nested too deeply") from None
    except ValueError as exc:
        # e.g. an integer with more digits than Python converts
        raise BadLine(f"JSON the parser cannot take: {exc}") from None


def _check_storable(prompt_id: str, messages: list[dict[str, Any]]) -> None:
    # Refuse the line here rather than fail the whole batch's insert (UnicodeEncodeError).
    (prompt_id + json.dumps(messages, ensure_ascii=False)).encode("utf-8")


def read_prompts(path: Path, summary: ImportSummary,
                 partition: Partition | None = None) -> Iterator[ImportRow]:
    """Stream the file's usable prompts; bad lines go into `summary`."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            summary.lines = lineno
            if not raw.strip():
                continue
            try:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise BadLine(f"not UTF-8 (byte {exc.start})") from None
                if lineno == 1 and text.startswith(BOM):
                    text = text[1:]
                try:
                    prompt_id, messages = parse_prompt(_decode_json(text))
                    _check_storable(prompt_id, messages)
                except UnicodeEncodeError:
                    # JSON's \ud800 escapes decode to lone surrogates, which UTF-8 cannot hold.
                    raise BadLine("contains an unpaired UTF-16 surrogate escape") from None
            except BadLine as exc:
                summary.rejected += 1
                if len(summary.errors) < MAX_ERRORS_KEPT:
                    summary.errors.append((lineno, str(exc)))
                continue
            if partition is not None and partition_of(prompt_id, partition.count) != partition.index:
                summary.other_partition += 1
                continue
            yield ImportRow(prompt_id, messages, lineno)


def import_file(store: Store, path: str | Path, partition: Partition | None = None,
                batch: int = BATCH, reimport_changed: bool = False,
                actor: str = "import") -> ImportSummary:
    """Import a prompts file into the store; idempotent (ids already there are duplicates).
    Duplicates whose text changed are counted; with `reimport_changed` they become new work."""
    summary = ImportSummary()
    rows: list[ImportRow] = []
    for row in read_prompts(Path(path), summary, partition):
        rows.append(row)
        if len(rows) >= batch:
            _flush(store, rows, summary, reimport_changed, actor)
    _flush(store, rows, summary, reimport_changed, actor)
    return summary


def _flush(store: Store, rows: list[ImportRow], summary: ImportSummary,
           reimport_changed: bool, actor: str) -> None:
    inserted, duplicates = store.import_batch(rows)
    summary.imported += inserted
    summary.duplicates += duplicates
    if duplicates:
        changed = store.changed_prompts(rows)
        summary.changed += len(changed)
        room = 10 - len(summary.changed_ids)
        summary.changed_ids.extend(r.id for r in changed[:max(room, 0)])
        if reimport_changed and changed:
            summary.reimported += store.reimport_changed(changed, actor)
    rows.clear()


def prompts_file_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a prompts file, in one line, or None."""
    if path.is_dir():
        return f"{path}: is a directory, not a prompts file"
    try:
        with open(path, "rb"):
            pass
    except FileNotFoundError:
        return f"{path}: no such file"
    except OSError as exc:
        return f"{path}: cannot read it: {exc.strerror}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dflash-supervisor import",
                                description="Import a JSONL prompts file into a job's state DB.")
    p.add_argument("prompts", help="JSONL file: messages / conversations / prompt / turns")
    p.add_argument("--state", required=True, help="state DB (created if absent)")
    p.add_argument("--partition", help="import only part I of N (e.g. 0/8), by stable id hash")
    p.add_argument("--reimport-changed", action="store_true",
                   help="ids already imported whose text changed: take the new text as new work")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        partition = Partition.parse(args.partition, "--partition") if args.partition else None
    except ConfigError as exc:
        print(f"dflash-supervisor import: {exc}", file=sys.stderr)
        return 2
    path = Path(args.prompts)
    problem = prompts_file_problem(path)
    if problem:
        print(f"dflash-supervisor import: {problem}", file=sys.stderr)
        return 2
    from state.offline_store import OfflineRefused, offline_store
    try:
        # The daemon is the DB's only writer: never import beside a running one.
        with offline_store(args.state, create=True) as store:
            summary = import_file(store, path, partition, reimport_changed=args.reimport_changed)
            total = store.counts().total
    except OfflineRefused as exc:
        print(f"dflash-supervisor import: {exc}", file=sys.stderr)
        return 2
    for lineno, reason in summary.errors:
        print(f"{path}:{lineno}: {reason}", file=sys.stderr)
    if summary.rejected > len(summary.errors):
        print(f"... and {summary.rejected - len(summary.errors)} more rejected lines",
              file=sys.stderr)
    print(f"{path}: {summary} ({total} prompts in {args.state})")
    warning = summary.changed_warning()
    if warning:
        print(f"dflash-supervisor import: {warning}", file=sys.stderr)
    if summary.usable == 0:
        print("dflash-supervisor import: nothing usable in the file", file=sys.stderr)
        return 1
    return 0
