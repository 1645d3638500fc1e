"""Import takes every line it can and rejects the rest by line number, whatever the parser's
complaint; a BOM is accepted; ShareGPT turns written role/content are taken; an id whose text
changed is reported and can be re-imported as new work (audited); bad paths are one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from state.store import Store
from supervisor.prompts.prompt_import import import_file, parse_prompt
from tests.fixtures.fs_faults import assert_one_line, cli
from tests.fixtures.prompt_lines import write
from tests.fixtures.state_db import read_db


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "job.db")
    yield s
    s.close()


def test_lines_the_parser_cannot_take_are_rejected_with_their_line_number(tmp_path, store):
    path = write(tmp_path / "p.jsonl", [
        {"id": "ok1", "prompt": "fine"},
        "[" * 200_000,                                   # RecursionError inside json
        '{"id": "big", "prompt": "x", "n": ' + "9" * 5000 + "}",   # int too long to convert
        '{"id": "sur", "prompt": "a \\ud800 b"}',        # lone surrogate: no UTF-8 for it
        '{"prompt": "\\udfff alone"}',                   # the same, with a hashed id
        {"id": "ok2", "prompt": "also fine"},
    ])
    summary = import_file(store, path)
    assert (summary.imported, summary.rejected) == (2, 4)
    lines = dict(summary.errors)
    assert lines[2] == "JSON nested too deeply"
    assert lines[3].startswith("JSON the parser cannot take")
    assert "surrogate" in lines[4] and "surrogate" in lines[5]
    assert store.counts().pending == 2


def test_a_byte_order_mark_does_not_cost_the_first_prompt(tmp_path, store):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"id": "first", "prompt": "hello"}\n'
                     + b'{"id": "second", "prompt": "again"}\n')
    summary = import_file(store, path)
    assert (summary.imported, summary.rejected) == (2, 0)
    assert store.prompt_status("first") is not None


def test_sharegpt_turns_written_role_content_are_taken_like_from_value():
    role_content = {"id": "r", "conversations": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"}]}
    from_value = {"id": "r", "conversations": [
        {"from": "system", "value": "be brief"}, {"from": "human", "value": "q1"},
        {"from": "gpt", "value": "a1"}, {"from": "human", "value": "q2"},
        {"from": "gpt", "value": "a2"}]}
    assert parse_prompt(role_content) == parse_prompt(from_value)
    assert parse_prompt(role_content)[1][-1] == {"role": "user", "content": "q2"}
    with pytest.raises(ValueError, match=r"conversations\[0\].role 'robot' is not a known speaker"):
        parse_prompt({"conversations": [{"role": "robot", "content": "x"}]})


def test_changed_text_is_reported_and_can_be_reimported_as_new_work(tmp_path, store):
    first = write(tmp_path / "v1.jsonl", [{"id": f"p{i}", "prompt": f"q{i}"} for i in range(30)])
    import_file(store, first)
    # Prompts that already have an answer: three of them will change.
    claimed = store.claim(30, "gpu0", 1.0)
    from tests.fixtures.state_db import done
    store.record([done(c.id, 2.0) for c in claimed])
    second = write(tmp_path / "v2.jsonl", [
        {"id": f"p{i}", "prompt": f"q{i}" + (" (edited)" if i in (3, 7, 12) else "")}
        for i in range(30)])
    summary = import_file(store, second)
    assert (summary.imported, summary.duplicates, summary.changed) == (0, 30, 3)
    assert sorted(summary.changed_ids) == ["p12", "p3", "p7"]
    warning = summary.changed_warning()
    assert warning is not None and "3 prompt ids" in warning and "--reimport-changed" in warning
    assert store.counts().done == 30                       # nothing changed without the option
    summary = import_file(store, second, reimport_changed=True, actor="tester")
    assert (summary.changed, summary.reimported) == (3, 3)
    assert summary.changed_warning() is None
    counts = store.counts()
    assert (counts.done, counts.pending) == (27, 3)
    (messages,) = read_db(store.path, "SELECT messages FROM prompts WHERE id = 'p7'")[0]
    assert json.loads(messages) == [{"role": "user", "content": "q7 (edited)"}]
    (detail, actor), = read_db(store.path, "SELECT detail, actor FROM events "
                                           "WHERE kind = 'reimport_changed'")
    assert actor == "tester" and json.loads(detail)["was_done"] == 3
    # Now the DB agrees with the file: nothing changed any more.
    assert import_file(store, second).changed == 0


def test_the_cli_reports_changed_ids_and_bad_paths_in_one_line(tmp_path):
    db = tmp_path / "job.db"
    path = write(tmp_path / "p.jsonl", [{"id": "a", "prompt": "one"}])
    assert cli(["import", str(path), "--state", str(db)]).returncode == 0
    write(path, [{"id": "a", "prompt": "one, edited"}])
    out = cli(["import", str(path), "--state", str(db)])
    assert out.returncode == 0
    assert_one_line(out, "1 prompt ids already imported have other text", "first: a")
    out = cli(["import", str(tmp_path), "--state", str(db)])
    assert out.returncode == 2
    assert_one_line(out, f"{tmp_path}: is a directory, not a prompts file")
    out = cli(["import", str(path), "--state", str(tmp_path)])
    assert out.returncode == 2 and "Traceback" not in out.stderr
    path.chmod(0o000)
    out = cli(["import", str(path), "--state", str(db)], no_file_override=True)
    assert out.returncode == 2
    assert_one_line(out, f"{path}: cannot read it: Permission denied")


def test_import_refuses_to_write_beside_a_running_daemon(tmp_path):
    db = tmp_path / "job.db"
    path = write(tmp_path / "p.jsonl", [{"id": "a", "prompt": "one"}])
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from state.job_lock import JobLock; "
         "JobLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)", str(db)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert holder.stdout.readline().strip() == "held"
        out = cli(["import", str(path), "--state", str(db)])
        assert out.returncode == 2
        assert_one_line(out, f"another daemon (pid {holder.pid}) runs this job")
    finally:
        holder.kill()
        holder.wait(timeout=10)
        holder.stdout.close()
    assert cli(["import", str(path), "--state", str(db)]).returncode == 0
