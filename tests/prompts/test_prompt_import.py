"""Import: the accepted shapes, rejects with line numbers, duplicates, partitions, the CLI."""

from __future__ import annotations

import json

import pytest

from state.store import Store
from supervisor.config import Partition
from supervisor.prompts.prompt_import import import_file, main, parse_prompt, partition_of
from tests.fixtures.prompt_lines import write
from tests.fixtures.real_prompts import CHAT_QUESTIONS


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "job.db")
    yield s
    s.close()


def test_every_shape_becomes_chat_messages():
    assert parse_prompt({"id": "a", "messages": [{"role": "system", "content": "be brief"},
                                                 {"role": "user", "content": "hi"}]}) == (
        "a", [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert parse_prompt({"id": 7, "conversations": [
        {"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"},
        {"from": "human", "value": "q2"}, {"from": "gpt", "value": "a2"}]}) == (
        "7", [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
              {"role": "user", "content": "q2"}])          # the trailing answer is dropped
    assert parse_prompt({"id": "b", "prompt": "2+2?"}) == ("b", [{"role": "user",
                                                                 "content": "2+2?"}])
    assert parse_prompt({"question_id": 81, "category": "writing", "turns": ["t1", "t2"]}) == (
        "81", [{"role": "user", "content": "t1"}])


def test_missing_id_is_a_stable_hash_of_the_prompt():
    a = parse_prompt({"prompt": "same"})[0]
    assert a == parse_prompt({"messages": [{"role": "user", "content": "same"}]})[0]
    assert a.startswith("h-") and a != parse_prompt({"prompt": "other"})[0]


def test_bad_lines_are_reported_by_number_and_the_rest_imported(tmp_path, store):
    path = write(tmp_path / "p.jsonl", [
        {"id": "ok1", "prompt": "fine"},
        "{not json",
        b"{\"id\": \"x\", \"prompt\": \"caf\xe9\"}",          # latin-1, not UTF-8
        {"id": "x2", "messages": []},
        {"id": "x3", "conversations": [{"from": "alien", "value": "?"}]},
        {"id": "x4"},
        "",
        [1, 2],
        {"id": "x5", "messages": [{"role": "assistant", "content": "only an answer"}]},
        {"id": None, "prompt": "null id is a hash"},
        {"id": {"a": 1}, "prompt": "bad id"},
        {"id": "ok2", "messages": [{"role": "user", "content": "fine too"}]},
    ])
    s = import_file(store, path)
    assert (s.imported, s.duplicates, s.rejected, s.lines) == (3, 0, 8, 12)
    reasons = dict(s.errors)
    assert sorted(reasons) == [2, 3, 4, 5, 6, 8, 9, 11]        # the blank line 7 is no error
    assert "malformed JSON" in reasons[2]
    assert "UTF-8" in reasons[3]
    assert "non-empty list" in reasons[4]
    assert "speaker" in reasons[5]
    assert "no 'messages'" in reasons[6]
    assert "not a JSON object" in reasons[8]
    assert "no user turn" in reasons[9]
    assert "'id'" in reasons[11]


def test_reimport_changes_nothing_and_counts_duplicates(tmp_path, store):
    path = write(tmp_path / "p.jsonl", [{"id": f"q{i}", "prompt": f"p{i}"} for i in range(20)]
                 + [{"id": "q3", "prompt": "duplicate id inside the file"}])
    first = import_file(store, path, batch=7)
    assert (first.imported, first.duplicates) == (20, 1)
    second = import_file(store, path, batch=7)
    assert (second.imported, second.duplicates, second.usable) == (0, 21, 21)
    assert store.counts().pending == 20


def test_partitions_are_disjoint_and_cover_the_file(tmp_path):
    path = write(tmp_path / "p.jsonl", [{"id": f"q{i}", "prompt": f"p{i}"} for i in range(300)])
    seen: list[str] = []
    for i in range(3):
        with Store.open(tmp_path / f"node{i}.db") as s:
            summary = import_file(s, path, partition=Partition(i, 3))
            assert summary.imported + summary.other_partition == 300
            assert 0 < summary.imported < 300
            claimed = s.claim(1000, "gpu0", 1.0)
            assert all(partition_of(c.id, 3) == i for c in claimed)
            seen += [c.id for c in claimed]
    assert sorted(seen) == sorted(f"q{i}" for i in range(300))


def test_real_benchmark_questions_import(tmp_path, store):
    s = import_file(store, CHAT_QUESTIONS)
    assert (s.imported, s.rejected) == (48, 0)
    [first] = store.claim(1, "gpu0", 1.0)
    q = json.loads(CHAT_QUESTIONS.read_text(encoding="utf-8").splitlines()[0])
    assert first.id == str(q["question_id"])
    assert first.messages == [{"role": "user", "content": q["turns"][0]}]


def test_cli_summary_and_exit_status(tmp_path, capsys):
    db = str(tmp_path / "sub" / "job.db")
    good = write(tmp_path / "good.jsonl", [{"id": "a", "prompt": "x"}, "garbage"])
    assert main([str(good), "--state", db]) == 0
    out, err = capsys.readouterr()
    assert "1 imported, 0 duplicate, 1 rejected" in out
    assert "good.jsonl:2: malformed JSON" in err
    assert main([str(good), "--state", db]) == 0                  # all duplicates: still usable
    assert "0 imported, 1 duplicate" in capsys.readouterr()[0]
    bad = write(tmp_path / "bad.jsonl", ["nope", {"x": 1}])
    assert main([str(bad), "--state", db]) == 1
    assert main([str(tmp_path / "missing.jsonl"), "--state", db]) == 2
    assert main([str(good), "--state", db, "--partition", "3/2"]) == 2
    assert main([str(good), "--state", db, "--partition", "0/2"]) in (0, 1)
