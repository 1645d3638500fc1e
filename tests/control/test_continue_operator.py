"""The operator's path of continuing truncated answers, on a real daemon with simulated
SGLang servers (separate processes on loopback) and its real state DB: the status figures
say what a raise would continue, as the DB holds it; `ctl max-tokens N --continue-truncated`
says what it did; the continued answers are counted as tokens not decoded again in the
status, the `status` text and `/metrics`, and the waste ledger does not count them as
thrown away."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from state.store import Store
from supervisor.contract.continuation import Continuation
from supervisor.contract.status import Status
from supervisor.job.continuable_reader import EVERY_LIMIT
from tests.control.test_socket_api import raw
from tests.fixtures import control_daemon as daemon

pytestmark = pytest.mark.slow


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor", *args], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[daemon.Daemon]:
    running = daemon.start(tmp_path_factory.mktemp("continue") / "job")
    yield running
    assert running.stop() == 0, running.log()[-3000:]


def from_the_db(d: daemon.Daemon) -> tuple[Continuation, tuple[int, int]]:
    """What the DB says a raise past every limit would continue, and the continued totals."""
    store = Store.open_readonly(d.db)
    try:
        can = store.continuable(EVERY_LIMIT)
        totals = store.continuation_totals()
    finally:
        store.close()
    return (Continuation(continuable=can.answers, tokens_kept=can.tokens_kept,
                         without_ids=can.without_ids, pending=totals.continuing),
            (totals.continued_answers, totals.continued_tokens))


def quiet(d: daemon.Daemon, reason: str) -> Status:
    """Dispatch paused and nothing in flight: the figures hold still."""
    with d.client() as client:
        client.pause(reason)
    return d.wait_status(lambda s: s.job.in_flight == 0, "nothing in flight", timeout_s=60)


def resume(d: daemon.Daemon) -> None:
    with d.client() as client:
        client.resume()


def test_status_says_what_a_raise_would_continue_as_the_db_holds_it(d: daemon.Daemon) -> None:
    d.wait_status(lambda s: s.continuation is not None and s.continuation.continuable >= 5,
                  "five truncated answers with stored tokens", timeout_s=90)
    quiet(d, "reading the continuation figures")
    try:
        expected, _ = from_the_db(d)
        s = d.wait_status(lambda s: s.continuation == expected,
                          f"the status to show {expected}", timeout_s=60)
        assert s.continuation is not None
        # The simulator streams its ids: every truncated answer kept them.
        assert s.continuation.without_ids == 0 and s.continuation.pending == 0
        assert s.continuation.tokens_kept >= s.continuation.continuable * s.max_tokens
        assert s.continuation.continuable == s.job.truncated
    finally:
        resume(d)


def test_ctl_continues_and_the_tokens_are_counted_as_not_decoded_again(
        d: daemon.Daemon) -> None:
    before = quiet(d, "raising max tokens")
    assert before.waste is not None and before.continuation is not None
    requeued_before = next(w.tokens for w in before.waste.causes if w.cause == "requeue")
    expected, (answers_before, tokens_before) = from_the_db(d)
    new = before.max_tokens * 2
    r = cli("ctl", "--socket", d.socket, "max-tokens", str(new), "--continue-truncated")
    assert r.returncode == 0, r.stderr
    assert (f"max tokens {before.max_tokens} -> {new}, {expected.continuable:,} truncated "
            f"answers to be continued ({expected.tokens_kept:,} tokens kept)") in r.stdout
    marked = d.wait_status(lambda s: s.continuation is not None and s.continuation.pending > 0,
                           "continuations waiting")
    assert marked.continuation is not None
    assert marked.continuation.pending == expected.continuable
    resume(d)
    done = d.wait_status(lambda s: s.continuation is not None and s.continuation.pending == 0
                         and s.waste is not None
                         and s.waste.continued_answers >= answers_before + expected.continuable,
                         "every continuation finished", timeout_s=120)
    after = quiet(d, "reading the ledger")
    try:
        _, (answers, tokens) = from_the_db(d)
        s = d.wait_status(lambda s: s.waste is not None
                          and (s.waste.continued_answers, s.waste.continued_tokens)
                          == (answers, tokens), "the ledger's continued totals")
        assert s.waste is not None and done.waste is not None
        # Each continued answer started from at least the old limit's tokens.
        assert tokens - tokens_before >= expected.continuable * before.max_tokens
        assert tokens - tokens_before >= expected.tokens_kept
        requeued = next(w.tokens for w in s.waste.causes if w.cause == "requeue")
        assert requeued == requeued_before, "continued answers counted as thrown away"
        text = cli("status", "--socket", d.socket)
        assert text.returncode == 0, text.stderr
        assert (f"not decoded again by continuing {answers:,} truncated answers"
                in text.stdout), text.stdout
        got = raw(d, b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        families = {f.name: f for f in text_string_to_metric_families(
            got.partition(b"\r\n\r\n")[2].decode())}
        assert families["dflash_continued_tokens"].samples[0].value == tokens
        assert families["dflash_continued_answers"].samples[0].value == answers
        assert after.max_tokens == new
    finally:
        resume(d)
