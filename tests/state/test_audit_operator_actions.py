"""`audit_operator_actions` against a real daemon's DB: each control-socket action is one row
(not its `control_action` record and its effect's event both), and `user` is the person, the
uid and pid in columns of their own, so `group by user` counts one person across the
processes they acted from. And state/README.md states the schema version the code writes."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from state.schema import SCHEMA_VERSION
from tests.fixtures import REPO
from tests.fixtures import control_daemon as daemon
from tests.fixtures.state_db import read_db

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[daemon.Daemon]:
    running = daemon.start(tmp_path_factory.mktemp("audit") / "job")
    yield running
    running.stop()


def ctl(d: daemon.Daemon, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "supervisor", "ctl", "--socket", d.socket,
                           *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_socket_action_is_one_row_with_the_user_apart_from_the_pid(d: daemon.Daemon):
    # Three processes, one person: what an operator does from the TUI and a shell.
    ctl(d, "pause", "audit", "test")
    ctl(d, "resume")
    ctl(d, "max-tokens", "300")
    rows = read_db(d.db, "SELECT user, uid, pid, via_socket, action FROM audit_operator_actions "
                         "WHERE via_socket ORDER BY id")
    user = pwd.getpwuid(os.getuid()).pw_name
    assert [(r[0], r[1], r[3], r[4]) for r in rows] == [
        (user, os.getuid(), 1, "pause"), (user, os.getuid(), 1, "resume"),
        (user, os.getuid(), 1, "max-tokens")]
    assert len({r[2] for r in rows}) == 3          # three pids, kept apart from the user
    # The effects (`paused`, `max_tokens` events) are in the events table, not again here.
    effects = read_db(d.db, "SELECT count(*) FROM events WHERE kind IN ('paused', 'max_tokens') "
                            "AND actor LIKE '% (uid %, pid %)'")
    assert effects[0][0] >= 2
    assert read_db(d.db, "SELECT count(*) FROM audit_operator_actions WHERE action IN "
                         "('paused', 'max_tokens')") == [(0,)]
    assert read_db(d.db, "SELECT user, count(*) FROM audit_operator_actions WHERE via_socket "
                         "GROUP BY user") == [(user, 3)]


def test_the_readme_states_the_schema_version_the_code_writes():
    text = (REPO / "state" / "README.md").read_text()
    stated = re.search(r"`PRAGMA user_version` \(now (\d+)", text)
    assert stated is not None and int(stated.group(1)) == SCHEMA_VERSION


def test_the_docs_name_one_db_path():
    paths = set()
    for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "state" / "README.md"]:
        paths |= set(re.findall(r"/var/lib/[\w.-]+/job\.db", Path(doc).read_text()))
    assert paths == {"/var/lib/dflash-supervisor/job.db"}
