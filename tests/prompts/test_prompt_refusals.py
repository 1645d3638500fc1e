"""Prompts that cannot be answered are refused at import, each with its line number and
reason, counted by kind in the import report and recorded in the state DB (import_refusals,
audit_import_refusals): empty or whitespace-only content, content parts that are not text,
no user turn. Trailing assistant turns are dropped with a counted warning, not refused.
Real prompt sets nobody here wrote (MT-bench, Vicuna-bench) import with no refusal."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from state.store import Store
from supervisor.prompts.prompt_import import import_file, main
from tests.fixtures.prompt_lines import write

# FastChat's MT-bench and Vicuna-bench questions, kept outside the repository (their README
# says where they come from); the test is skipped where they are not.
REAL_SETS = Path(os.environ.get("DFLASH_REAL_PROMPT_SETS",
                                Path(__file__).resolve().parents[3] / "shared" / "data"))


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "job.db")
    yield s
    s.close()


def _user(content) -> dict:
    return {"role": "user", "content": content}


LINES = [
    {"id": "ok", "messages": [_user("What is 2+2?")]},                                    # 1
    {"id": "blank", "messages": [_user("  \n\t ")]},                                      # 2
    {"id": "empty", "messages": [{"role": "system", "content": ""}, _user("hi")]},        # 3
    {"id": "image", "messages": [_user([{"type": "text", "text": "What is this?"},
                                        {"type": "image_url",
                                         "image_url": {"url": "http://x/cat.png"}}])]},   # 4
    {"id": "typeless", "messages": [_user([{}])]},                                        # 5
    {"id": "parts", "messages": [_user([{"type": "text", "text": "Say "},
                                        {"type": "text", "text": "hello."}])]},           # 6
    {"id": "blank-parts", "messages": [_user([{"type": "text", "text": " "}])]},          # 7
    {"id": "system-only", "messages": [{"role": "system", "content": "be brief"}]},       # 8
    {"id": "answered", "conversations": [{"from": "human", "value": "q1"},
                                         {"from": "gpt", "value": "a1"}]},                # 9
    {"id": "empty-answer", "conversations": [{"from": "human", "value": "q2"},
                                             {"from": "gpt", "value": ""}]},              # 10
    {"id": "only-answers", "messages": [{"role": "assistant", "content": "a"}]},          # 11
    {"id": "ws-prompt", "prompt": "   "},                                                 # 12
    {"question_id": 99, "turns": ["\n"]},                                                 # 13
    {"id": "mid-blank", "conversations": [{"from": "human", "value": "q"},
                                          {"from": "gpt", "value": " "},
                                          {"from": "human", "value": "q again"}]},        # 14
    "{broken",                                                                            # 15
]


def test_unanswerable_lines_are_refused_by_line_counted_by_kind_and_kept_in_the_db(
        tmp_path: Path, store: Store):
    path = write(tmp_path / "p.jsonl", LINES)
    s = import_file(store, path)
    reasons = dict(s.errors)
    assert reasons == {
        2: "messages[0].content is only whitespace: nothing to answer",
        3: "messages[0].content is empty: nothing to answer",
        4: "messages[0].content[1] is a part of type 'image_url': only text parts can be answered",
        5: "messages[0].content[0] is a part with no type ({}): only text parts can be answered",
        7: "messages[0].content is only whitespace: nothing to answer",
        8: "no user turn to answer",
        11: "no user turn to answer (only assistant turns)",
        12: "'prompt' is only whitespace: nothing to answer",
        13: "turns[0] is only whitespace: nothing to answer",
        14: "conversations[1].value is only whitespace: nothing to answer",
        15: "malformed JSON: Expecting property name enclosed in double quotes at column 2",
    }
    assert (s.imported, s.rejected, s.dropped_answers) == (4, 11, 2)
    assert s.rejected_by_kind == {"empty_content": 6, "non_text_content": 2,
                                  "no_user_turn": 2, "malformed": 1}
    assert str(s) == ("4 imported, 0 duplicate, 11 rejected (6 empty content, 1 malformed, "
                      "2 no user turn, 2 non text content), 2 with trailing answers dropped")
    assert s.dropped_warning() == (
        "2 prompts ended with assistant turns (the dataset's own answers): dropped, each "
        "prompt ends at its last user turn and the model answers that")
    # The answerable ones, as they will be sent: the dataset's answers gone.
    claimed = {c.id: c.messages for c in store.claim(10, "gpu0", 1.0)}
    assert claimed == {"ok": [_user("What is 2+2?")],
                       "parts": LINES[5]["messages"],
                       "answered": [_user("q1")], "empty-answer": [_user("q2")]}
    # Every refusal in the DB, with the line's own id where it had one.
    refused = store.import_refusals()
    assert [(r.line, r.prompt_id, r.kind) for r in refused] == [
        (2, "blank", "empty_content"), (3, "empty", "empty_content"),
        (4, "image", "non_text_content"), (5, "typeless", "non_text_content"),
        (7, "blank-parts", "empty_content"), (8, "system-only", "no_user_turn"),
        (11, "only-answers", "no_user_turn"), (12, "ws-prompt", "empty_content"),
        (13, "99", "empty_content"), (14, "mid-blank", "empty_content"),
        (15, None, "malformed")]
    assert {r.file for r in refused} == {str(path.resolve())}
    assert [r.reason for r in refused] == [reasons[r.line] for r in refused]
    assert store._read("SELECT kind, lines, first_line FROM audit_import_refusals") == [
        ("empty_content", 6, 2), ("no_user_turn", 2, 8), ("non_text_content", 2, 4),
        ("malformed", 1, 15)]


def test_importing_a_file_again_replaces_its_refusals(tmp_path: Path, store: Store):
    path = write(tmp_path / "p.jsonl", [{"id": "a", "prompt": " "}, {"id": "b", "prompt": ""}])
    assert import_file(store, path).rejected == 2
    assert store.import_refusal_count() == 2
    write(path, [{"id": "a", "prompt": "fixed"}, {"id": "b", "prompt": ""}])
    s = import_file(store, path)
    assert (s.imported, s.rejected) == (1, 1)
    assert [(r.line, r.prompt_id) for r in store.import_refusals()] == [(2, "b")]
    other = write(tmp_path / "q.jsonl", [{"prompt": "\t"}])
    import_file(store, other)
    assert store.import_refusal_count() == 2          # another file's rows beside this one's


def test_the_cli_reports_refusals_by_kind_and_the_dropped_answers(tmp_path: Path, capsys):
    path = write(tmp_path / "p.jsonl", LINES)
    assert main([str(path), "--state", str(tmp_path / "job.db")]) == 0
    out, err = capsys.readouterr()
    assert "4 imported, 0 duplicate, 11 rejected (6 empty content" in out
    assert f"{path}:4: messages[0].content[1] is a part of type 'image_url'" in err
    assert ("dflash-supervisor import: 2 prompts ended with assistant turns (the dataset's own "
            "answers): dropped") in err


@pytest.mark.parametrize("name", ["mt_bench_questions.jsonl", "vicuna_bench_questions.jsonl"])
def test_real_prompt_sets_import_with_no_refusal(tmp_path: Path, store: Store, name: str):
    path = REAL_SETS / name
    if not path.is_file():
        pytest.skip(f"{path} is not here (set DFLASH_REAL_PROMPT_SETS to its folder)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    s = import_file(store, path)
    assert (s.rejected, s.errors, s.dropped_answers) == (0, [], 0)
    assert s.imported == len(rows) == store.counts().pending
    assert store.import_refusal_count() == 0
    # Each question's first turn is its prompt, text untouched (quotes, newlines, scripts).
    claimed = {c.id: c.messages for c in store.claim(len(rows), "gpu0", 1.0)}
    assert claimed == {str(r["question_id"]): [_user(r["turns"][0])] for r in rows}


def test_the_daemons_start_logs_the_refusals_and_the_dropped_answers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    from supervisor.job.store_setup import open_job_store
    from tests.fixtures.dispatching import job_config

    path = write(tmp_path / "p.jsonl", LINES)
    cfg = job_config(tmp_path, job={"prompts": str(path), "state": "job.db"})
    with caplog.at_level("INFO", logger="supervisor.job"):
        with open_job_store(cfg) as store:
            assert store.counts().pending == 4 and store.import_refusal_count() == 11
    lines = [r.getMessage() for r in caplog.records if r.name == "supervisor.job"]
    assert f"imported {path}: 4 imported, 0 duplicate, 11 rejected (6 empty content, " \
           "1 malformed, 2 no user turn, 2 non text content), 2 with trailing answers " \
           "dropped" in lines
    assert f"{path}:2: messages[0].content is only whitespace: nothing to answer" in lines
    assert f"{path}: 1 more refused line (all in the state DB's import_refusals)" in lines
    assert any(line.startswith(f"{path}: 2 prompts ended with assistant turns") for line in lines)


def test_one_dropped_answer_is_said_in_the_singular(tmp_path: Path, store: Store):
    path = write(tmp_path / "p.jsonl", [{"conversations": [{"from": "human", "value": "q"},
                                                          {"from": "gpt", "value": "a"}]}])
    s = import_file(store, path)
    assert s.dropped_warning().startswith("1 prompt ended with assistant turns")
