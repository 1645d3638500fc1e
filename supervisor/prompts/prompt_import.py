"""`dflash-supervisor import PROMPTS.jsonl --state PATH [--partition I/N]`

Streams a JSONL file into the state DB as pending prompts, batch by batch (memory stays flat
however big the file is). Each line is one prompt in one of these shapes:

- OpenAI:   {"id"?, "messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}
- ShareGPT: {"id"?, "conversations": [{"from": "human"|"gpt"|"system", "value": ...}, ...]}
            (turns written {"role": ..., "content": ...} are taken the same way)
- bare:     {"id"?, "prompt": "..."}
- MT-bench: {"question_id": 81, "turns": ["...", ...]} (the first turn is the prompt)

A `content` is a string or OpenAI's list of content parts, all of them text parts
({"type": "text", "text": ...}).

Trailing assistant turns are dropped, with a counted warning, not refused: the prompt is
everything up to the last user turn, and the model writes the answer. A ShareGPT-style
conversation ends with the dataset's own answer, and regenerating it with the served model is
what the job is for; refusing such lines would refuse nearly all of such a file.

Lines that cannot be answered are refused, each with its line number and reason, counted by
kind in the import report and recorded in the state DB's `import_refusals` table (a file
imported again replaces its own rows): malformed lines (not JSON, not UTF-8, missing or
ill-typed fields), a turn whose content is empty or only whitespace, a content part that is
not text (`image_url`, a part with no type such as `{}`: the job sends text to a text model),
and a line with no user turn. The id is the line's `id` (or MT-bench `question_id`), else a
stable hash of the messages, so re-importing the same file inserts nothing new. A UTF-8
byte-order mark is skipped. An id already imported with other text is reported (count and
first ids); `--reimport-changed` takes the new text as new work for those ids. Exit status is
non-zero only when the file yields nothing usable.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from state.prompts_table import ImportRefusal
from state.records import ImportRow
from state.store import Store
from supervisor.config import ConfigError, Partition
from supervisor.prompts.prompt_line import BadLine, parse_line, parse_prompt

# What a line means is prompt_line.py's; parse_prompt stays importable from here.
__all__ = ["BadLine", "ImportSummary", "import_file", "main", "parse_prompt", "partition_of",
           "prompts_file_problem", "read_prompts"]

BATCH = 5000
MAX_ERRORS_KEPT = 100


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
    # Rejected lines by kind (prompt_line.py: malformed, empty_content, ...).
    rejected_by_kind: dict[str, int] = field(default_factory=dict)
    # Prompts (of this node) whose trailing assistant turns were dropped.
    dropped_answers: int = 0

    @property
    def usable(self) -> int:
        """Prompts the file provides for this node (new or already imported)."""
        return self.imported + self.duplicates

    def __str__(self) -> str:
        text = (f"{self.imported} imported, {self.duplicates} duplicate, "
                f"{self.rejected} rejected")
        if self.rejected_by_kind:
            text += " (" + ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in
                                     sorted(self.rejected_by_kind.items())) + ")"
        if self.dropped_answers:
            text += f", {self.dropped_answers} with trailing answers dropped"
        if self.other_partition:
            text += f", {self.other_partition} in other partitions"
        if self.changed:
            text += f", {self.changed} changed since imported"
        if self.reimported:
            text += f" ({self.reimported} re-imported as new work)"
        return text

    def dropped_warning(self) -> str | None:
        """The counted warning for trailing assistant turns dropped, or None."""
        if not self.dropped_answers:
            return None
        n = self.dropped_answers
        prompts = "1 prompt" if n == 1 else f"{n} prompts"
        return (f"{prompts} ended with assistant turns (the dataset's own answers): dropped, "
                "each prompt ends at its last user turn and the model answers that")

    def changed_warning(self) -> str | None:
        """What an operator must hear about ids whose text changed, or None."""
        if not self.changed or self.reimported:
            return None
        more = "…" if self.changed > len(self.changed_ids) else ""
        return (f"{self.changed} prompt ids already imported have other text in the file now "
                f"(first: {', '.join(self.changed_ids)}{more}); their old text is kept. "
                "Re-import them as new work with `dflash-supervisor import FILE --state DB "
                "--reimport-changed`")


def partition_of(prompt_id: str, count: int) -> int:
    """Which of `count` parts a prompt belongs to: a stable hash of its id, the same on
    every node and every run (Python's hash() is salted per process; this is not)."""
    return int.from_bytes(hashlib.sha256(prompt_id.encode("utf-8")).digest()[:8], "big") % count


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


# Called with each refused line: (line number, the line's own id or None, why).
OnRefused = Callable[[int, str | None, BadLine], None]


def _own_id(obj: Any) -> str | None:
    """A refused line's id, where it has a usable one (to find it in the file again)."""
    if not isinstance(obj, dict):
        return None
    raw = obj.get("id", obj.get("question_id"))
    if isinstance(raw, (str, int)) and not isinstance(raw, bool) and str(raw):
        return str(raw)
    return None


def read_prompts(path: Path, summary: ImportSummary, partition: Partition | None = None,
                 on_refused: OnRefused | None = None) -> Iterator[ImportRow]:
    """Stream the file's usable prompts; bad lines go into `summary` (and to `on_refused`)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            summary.lines = lineno
            if not raw.strip():
                continue
            obj: Any = None
            try:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise BadLine(f"not UTF-8 (byte {exc.start})") from None
                if lineno == 1 and text.startswith(BOM):
                    text = text[1:]
                try:
                    obj = _decode_json(text)
                    parsed = parse_line(obj)
                    _check_storable(parsed.id, parsed.messages)
                except UnicodeEncodeError:
                    # JSON's \ud800 escapes decode to lone surrogates, which UTF-8 cannot hold.
                    raise BadLine("contains an unpaired UTF-16 surrogate escape") from None
            except BadLine as exc:
                summary.rejected += 1
                summary.rejected_by_kind[exc.kind] = summary.rejected_by_kind.get(exc.kind, 0) + 1
                if len(summary.errors) < MAX_ERRORS_KEPT:
                    summary.errors.append((lineno, str(exc)))
                if on_refused is not None:
                    try:
                        own_id = _own_id(obj)
                        if own_id is not None:
                            own_id.encode("utf-8")
                    except UnicodeEncodeError:
                        own_id = None
                    on_refused(lineno, own_id, exc)
                continue
            if partition is not None and partition_of(parsed.id, partition.count) != partition.index:
                summary.other_partition += 1
                continue
            if parsed.dropped_answers:
                summary.dropped_answers += 1
            yield ImportRow(parsed.id, parsed.messages, lineno)


def import_file(store: Store, path: str | Path, partition: Partition | None = None,
                batch: int = BATCH, reimport_changed: bool = False,
                actor: str = "import") -> ImportSummary:
    """Import a prompts file into the store; idempotent (ids already there are duplicates).
    Duplicates whose text changed are counted; with `reimport_changed` they become new work.
    Refused lines are recorded in the store's import_refusals (this file's earlier ones
    replaced), so the DB says which lines of the file were not run, and why."""
    summary = ImportSummary()
    file = str(Path(path).resolve())
    now = time.time()
    store.clear_import_refusals(file)
    refused: list[ImportRefusal] = []

    def on_refused(lineno: int, own_id: str | None, exc: BadLine) -> None:
        refused.append(ImportRefusal(file, lineno, own_id, exc.kind, str(exc), now))
        if len(refused) >= batch:
            store.record_import_refusals(refused)
            refused.clear()

    rows: list[ImportRow] = []
    for row in read_prompts(Path(path), summary, partition, on_refused):
        rows.append(row)
        if len(rows) >= batch:
            _flush(store, rows, summary, reimport_changed, actor)
    _flush(store, rows, summary, reimport_changed, actor)
    store.record_import_refusals(refused)
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
    for warning in (summary.dropped_warning(), summary.changed_warning()):
        if warning:
            print(f"dflash-supervisor import: {warning}", file=sys.stderr)
    if summary.usable == 0:
        print("dflash-supervisor import: nothing usable in the file", file=sys.stderr)
        return 1
    return 0
