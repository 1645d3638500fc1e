"""Opening a job's state at start: a killed daemon's in-flight prompts back to pending, the
prompts file imported once per version of the file, and the clear errors when it cannot be."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from state.settings_keys import Setting
from state.store import Store
from supervisor.job.store_setup import JobError, open_job_store
from tests.fixtures.dispatching import job_config
from tests.fixtures.real_prompts import CHAT_QUESTIONS, write_jsonl


def _config(tmp_path: Path, prompts: Path):
    return job_config(tmp_path, job={"prompts": str(prompts), "state": "state/job.db"})


def test_imports_once_and_again_only_when_the_file_changes(tmp_path: Path):
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "prompt": "x"}])
    cfg = _config(tmp_path, prompts)
    with open_job_store(cfg) as store:
        assert store.counts().total == 1
        first = store.get_setting(Setting.IMPORTED_PROMPTS)
    assert first is not None and str(prompts.resolve()) in first
    with open_job_store(cfg) as store:                    # same file: not read again
        assert store.get_setting(Setting.IMPORTED_PROMPTS) == first
    write_jsonl(prompts, [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"}])
    os.utime(prompts, ns=(1, 1))                           # a different mtime, for certain
    with open_job_store(cfg) as store:
        assert store.counts().total == 2
        assert store.get_setting(Setting.IMPORTED_PROMPTS) != first


def test_in_flight_prompts_of_a_killed_daemon_are_pending_again(tmp_path: Path):
    cfg = _config(tmp_path, CHAT_QUESTIONS)
    with open_job_store(cfg) as store:
        assert len(store.claim(5, "gpu0", 1.0)) == 5       # then the daemon "dies"
    with open_job_store(cfg) as store:
        c = store.counts()
        assert (c.pending, c.in_flight, c.total) == (48, 0, 48)
        [event] = store.recent_events(5, "recovered_in_flight")
        assert event.detail == {"count": 5}


def test_a_missing_prompts_file_is_an_error_only_before_anything_was_imported(tmp_path: Path):
    missing = tmp_path / "gone.jsonl"
    with pytest.raises(JobError, match="gone.jsonl: no such file, and no prompts imported yet"):
        open_job_store(_config(tmp_path, missing))
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "prompt": "x"}])
    open_job_store(_config(tmp_path, prompts)).close()
    prompts.rename(missing.with_name("moved.jsonl"))
    with open_job_store(_config(tmp_path, prompts)) as store:   # carries on with what it has
        assert store.counts().total == 1


def test_a_file_with_no_usable_prompt_is_an_error_and_the_hooks_run_around_the_open(
        tmp_path: Path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"nothing": "here"}])
    calls: list[str] = []
    with pytest.raises(JobError, match="no usable prompts"):
        open_job_store(_config(tmp_path, bad), before_open=lambda: calls.append("before"),
                       after_open=lambda s: calls.append("after"))
    # after_open runs before the import: a restored node takes back its uploaded shards
    # before the output is checked, and the output is checked before anything is imported.
    assert calls == ["before", "after"]
    good = write_jsonl(tmp_path / "good.jsonl", [{"id": "a", "prompt": "x"}])
    seen: list[Store] = []
    with open_job_store(_config(tmp_path, good), after_open=seen.append) as store:
        assert seen == [store]
