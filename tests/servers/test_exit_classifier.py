from __future__ import annotations

import signal

import pytest

from supervisor.servers.exit_classifier import ExitKind, Trigger, classify


@pytest.mark.parametrize("line", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "[2025-01-01 00:00:00 TP0] Prefill out of memory. Try to lower your batch size.",
    "Decode out of memory happened. #retracted_reqs: 3",
    "torch.OutOfMemoryError: something",
])
def test_oom_lines_win_over_exit_code(line: str) -> None:
    r = classify(Trigger.EXITED, 1, ["loading", line, "Traceback ..."])
    assert r.kind is ExitKind.OOM and r.evidence == line and r.exit_code == 1 and r.is_failure


def test_sigkill_after_oom_lines_is_oom() -> None:
    r = classify(Trigger.EXITED, -signal.SIGKILL, ["Decode out of memory happened"])
    assert r.kind is ExitKind.OOM and r.signal == 9
    assert "killed by signal 9 (SIGKILL)" in r.detail


def test_sigkill_without_oom_lines_is_a_crash_with_a_hint() -> None:
    r = classify(Trigger.EXITED, -9, ["all fine"])
    assert r.kind is ExitKind.CRASH and r.signal == 9 and "OOM killer" in r.detail


def test_crash_keeps_exit_code() -> None:
    r = classify(Trigger.EXITED, 3, ["ValueError: boom"])
    assert (r.kind, r.exit_code, r.signal) == (ExitKind.CRASH, 3, None)
    assert str(r) == "crash: exited with code 3"
    assert "unexpectedly" in classify(Trigger.EXITED, 0, []).detail


def test_hang_stall_startup_and_stopped() -> None:
    assert classify(Trigger.HEALTH, -15, [], "health probe failed").kind is ExitKind.HANG
    assert classify(Trigger.PROGRESS, -15, [], "no progress").kind is ExitKind.STALL
    assert classify(Trigger.STARTUP_TIMEOUT, -15, []).kind is ExitKind.STARTUP_TIMEOUT
    # A hang whose log shows an OOM is an OOM: the fix is the same.
    assert classify(Trigger.HEALTH, -15, ["CUDA out of memory"], "hung").kind is ExitKind.OOM
    stopped = classify(Trigger.REQUESTED, -15, ["CUDA out of memory"], "restart by alice")
    assert stopped.kind is ExitKind.STOPPED and not stopped.is_failure
    assert classify(Trigger.SPAWN_FAILED, None, [], "no such file").kind is ExitKind.CRASH
