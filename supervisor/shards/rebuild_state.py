"""`dflash-supervisor rebuild-state --config job.toml`: a lost state DB rebuilt from the output.

A shard line carries everything the DB kept about its prompt (the prompt, the answer, tokens,
max tokens, model, server, attempts, finish time), and a shard file is a pure function of those
rows, so the output is a backup of every finished prompt. The rebuild imports the prompts file,
then puts each shard found in the output back with its prompts done exactly as their lines
say, and checks that the DB rebuilds each shard byte for byte. A shard that does not (a cut or
edited line) is marked to be rewritten from what could be read; prompts whose lines were lost
are pending and get generated again. Then `run` resumes where the lost DB stood.

Refuses to touch a state DB that already holds prompts or shards: move it aside first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from state.shard_audit import RestoredLine
from state.store import Store
from supervisor.config import JobConfig
from supervisor.contract.event_kinds import EventKind

_SEQ = re.compile(r"shard-(\d+)\.jsonl$")


class BadShardLine(ValueError):
    pass


def restored_line(raw: bytes) -> RestoredLine:
    """One shard line back into the DB's fields (the inverse of the writer's line_object)."""
    try:
        obj = json.loads(raw)
        messages = obj["messages"]
        answer = messages[-1]
        if answer.get("role") != "assistant":
            raise BadShardLine("the last message is not the answer")
        usage = obj["usage"]
        return RestoredLine(
            id=str(obj["id"]), messages=messages[:-1], content=answer.get("content"),
            reasoning_content=answer.get("reasoning_content"),
            finish_reason=obj.get("finish_reason"), prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            reasoning_tokens=usage.get("reasoning_tokens"), max_tokens=obj.get("max_tokens"),
            model=obj.get("model"), server=obj.get("server"), attempts=int(obj["attempt"]),
            finished_at=obj.get("time"), loop=obj.get("loop"),
            continued_from=obj.get("continued_from"))
    except BadShardLine:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise BadShardLine(f"not a shard line ({type(exc).__name__}: {exc})") from None


@dataclass
class RebuildSummary:
    shards: int = 0
    lines: int = 0
    bad_lines: int = 0
    to_rewrite: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def rebuild(store: Store, config: JobConfig, sink: Any, spool: Path) -> RebuildSummary:
    """Blocking. `store` is an empty DB with the prompts file already imported."""
    from supervisor.shards.verify import _ours, key_prefix
    from supervisor.shards.writer import shard_bytes
    from supervisor.uploads.local_files import list_shard_files

    prefix = key_prefix(config.job.partition)
    remote = {k for k in sink.list_keys(prefix) if _ours(k, prefix)}
    spooled = ({k for k in list_shard_files(spool, prefix) if _ours(k, prefix)}
               if sink.remote else set())
    summary = RebuildSummary()
    now = time.time()
    for key in sorted(remote | spooled, key=lambda k: (len(k), k)):
        match = _SEQ.search(key)
        if match is None:
            continue
        in_spool = key in spooled
        data = (spool / key).read_bytes() if in_spool else sink.read(key)
        lines: list[RestoredLine] = []
        for n, raw in enumerate(data.splitlines(), 1):
            try:
                lines.append(restored_line(raw))
            except BadShardLine as exc:
                summary.bad_lines += 1
                summary.problems.append(f"{key}:{n}: {exc}")
        # A local output is checked in place by the uploader; an S3 object was verified
        # when it was uploaded, a spool copy still has to go out.
        status = "uploaded" if sink.remote and not in_spool else "written"
        shard_id = int(match.group(1))
        store.restore_shard(shard_id, key, lines, status=status, size=len(data),
                            sha256=hashlib.sha256(data).hexdigest(),
                            md5=hashlib.md5(data).hexdigest(), etag=None, now=now)
        summary.shards += 1
        summary.lines += len(lines)
        if shard_bytes(store.shard_lines(shard_id)) != data:
            store.reassign_shard(shard_id, "rebuilt from a damaged file", "rebuild-state")
            summary.to_rewrite.append(key)
    store.recount()
    store.add_event(EventKind.STATE_REBUILT, "job",
                    {"shards": summary.shards, "lines": summary.lines,
                     "bad_lines": summary.bad_lines, "to_rewrite": summary.to_rewrite[:20]},
                    "rebuild-state", now)
    return summary


class RebuildRefused(RuntimeError):
    """Why the rebuild did not happen, in one line."""


def rebuild_from_config(config: JobConfig) -> tuple[RebuildSummary, Any, Any]:
    """(summary, import summary, counts) or RebuildRefused."""
    from state.offline_store import OfflineRefused, offline_store
    from state.settings_keys import Setting
    from supervisor.prompts.prompt_import import import_file, prompts_file_problem
    from supervisor.shards.keys import spool_dir
    from supervisor.uploads.sink import UploadError
    from supervisor.uploads.wiring import build_sink, output_location

    state, prompts = config.path(config.job.state), config.path(config.job.prompts)
    problem = prompts_file_problem(prompts)
    if problem:
        raise RebuildRefused(f"job.prompts: {problem}")
    try:
        with offline_store(state, create=True) as store:
            if store.counts().total or store.shard_keys():
                raise RebuildRefused(f"{state} already holds a job; move it aside first")
            imported = import_file(store, prompts, partition=config.job.partition)
            spool = spool_dir(config)
            summary = rebuild(store, config, build_sink(config, spool), spool)
            store.set_setting(Setting.OUTPUT_LOCATION, output_location(config, spool, store.path))
            return summary, imported, store.counts()
    except (OfflineRefused, UploadError) as exc:
        raise RebuildRefused(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    from supervisor.config import ConfigError, load_config

    p = argparse.ArgumentParser(prog="dflash-supervisor rebuild-state",
                                description="Rebuild a lost state DB from the output shards "
                                            "and the prompts file.")
    p.add_argument("--config", required=True, help="the job's TOML config")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    err = "dflash-supervisor rebuild-state:"
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"{err} invalid config: {exc}", file=sys.stderr)
        return 2
    try:
        summary, imported, counts = rebuild_from_config(config)
    except RebuildRefused as exc:
        print(f"{err} {exc}", file=sys.stderr)
        return 2
    state = config.path(config.job.state)
    for line in summary.problems[:20]:
        print(line, file=sys.stderr)
    print(f"{state}: rebuilt from {config.job.output}: {summary.shards} shards, "
          f"{summary.lines} lines; prompts {imported}; now {counts.done} done, "
          f"{counts.pending} pending")
    if summary.to_rewrite:
        print(f"{len(summary.to_rewrite)} damaged shards will be rewritten at the next start "
              f"(first: {', '.join(summary.to_rewrite[:3])})")
    return 0
