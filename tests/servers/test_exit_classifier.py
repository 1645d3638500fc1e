"""Exit classification against SGLang 0.5.23's own log lines. Each line below is built the way
SGLang writes it: `[%(asctime)s{prefix}] %(message)s` (`sglang/srt/utils/common.py`
configure_logger) around the message in the file named beside it."""

from __future__ import annotations

import signal

import pytest

from supervisor.servers.exit_classifier import ExitKind, Trigger, classify, describe_unasked_exit

T = "[2026-12-04 03:12:45 TP0] "

# sglang/srt/managers/scheduler.py (retract_decode's caller): the warning a retraction logs.
RETRACT = (T + "KV cache pool is full. Retract requests. #retracted_reqs: 12, "
           "#new_tokens_gained: 40960, #mamba_num_gained: 12, #new_token_ratio: 0.4100 -> 0.7000")
# The same event as older SGLang releases worded it.
RETRACT_OLD = T + "Decode out of memory happened. #retracted_reqs: 3, #new_token_ratio: 0.7 -> 1.0"

# sglang/srt/managers/scheduler.py run_scheduler_process: the traceback, then SIGQUIT to the
# launcher, whose handler (sglang/srt/managers/tokenizer_manager.py
# running_phase_sigquit_handler) logs and kill_process_tree()s itself: SIGKILL.
CRASH = [
    T + "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", '
    "line 6367, in run_scheduler_process",
    "    scheduler.run_event_loop()",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "",
    "[2026-12-04 03:12:45] SIGQUIT received. signum=3, frame=<frame at 0x7f, file "
    "'/usr/lib/python3.11/threading.py', line 331, code wait>. It usually means one child failed.",
    "[2026-12-04 03:12:45] kill_process_tree called: parent_pid=4242, include_parent=True, pid=4242",
]
# sglang/srt/utils/watchdog.py SubprocessWatchdog._check_processes.
SUBPROCESS = ("[2026-12-04 03:12:45] Subprocess scheduler_0 (pid=4301) crashed with exit code -11. "
              "Triggering SIGQUIT for cleanup...")
# sglang/srt/utils/watchdog.py WatchdogRaw._watchdog_once, debug_name "Scheduler"
# (sglang/srt/managers/scheduler_components/invariant_checker.py).
WATCHDOG = T + "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
SOFT_WATCHDOG = T + "Scheduler watchdog timeout (self.watchdog_timeout=60, self.soft=True)"
# sglang/srt/server_args.py prepare_server_args: parser.parse_args on ArgumentParser(prog="sglang
# serve"); argparse prints usage and this line, then exits 2.
USAGE = "usage: sglang serve [-h] --model-path MODEL_PATH [--host HOST] [--port PORT] ..."
UNRECOGNIZED = "sglang serve: error: unrecognized arguments: --max-mamba-cache-slots 160"
AMBIGUOUS = ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
             "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")
BAD_CHOICE = ("sglang serve: error: argument --reasoning-parser: invalid choice: 'qwen9' "
              "(choose from 'auto', 'deepseek-r1', 'qwen3')")


@pytest.mark.parametrize("line", [
    # torch's allocator message (what a scheduler traceback ends with).
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    # The CUDA runtime's text for cudaErrorMemoryAllocation, as torch raises it (SGLang's own
    # sglang/multimodal_gen/test/unit/test_warmup_probe_degradation.py treats it as OOM).
    "RuntimeError: CUDA error: out of memory",
    # sglang/srt/model_executor/pool_configurator.py.
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    # sglang/srt/mem_cache/allocation.py (both raise RuntimeError after logging).
    T + "Prefill out of memory. Try to lower your batch size.",
    T + "Decode out of memory. Try to lower your batch size.",
    "torch.OutOfMemoryError: something",
])
def test_oom_lines_win_over_exit_code(line: str) -> None:
    r = classify(Trigger.EXITED, 1, ["loading", line, "Traceback ..."])
    assert r.kind is ExitKind.OOM and r.evidence == line and r.exit_code == 1 and r.is_failure


def test_sigkill_after_oom_lines_is_oom() -> None:
    oom_crash = [CRASH[0], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                 *CRASH[4:]]
    r = classify(Trigger.EXITED, -signal.SIGKILL, oom_crash)
    assert r.kind is ExitKind.OOM and r.signal == 9
    assert "killed by signal 9 (SIGKILL)" in r.detail and "CUDA out of memory" in r.evidence


@pytest.mark.parametrize("retraction", [RETRACT, RETRACT_OLD])
def test_retraction_is_normal_and_never_makes_a_later_death_oom(retraction: str) -> None:
    # Hours of retraction under memory pressure, then an unrelated scheduler crash.
    r = classify(Trigger.EXITED, -signal.SIGKILL, [retraction] * 50 + CRASH)
    assert r.kind is ExitKind.CRASH
    assert r.evidence == ("[2026-12-04 03:12:45 TP0] Scheduler hit an exception: Traceback (most "
                          "recent call last): ... RuntimeError: CUDA error: an illegal memory "
                          "access was encountered")
    # ...or a signal 9 with nothing else said: still not an OOM.
    assert classify(Trigger.EXITED, -9, [retraction]).kind is ExitKind.CRASH
    assert classify(Trigger.HEALTH, -15, [retraction], "hung").kind is ExitKind.HANG


def test_sglang_crash_ends_by_sigkill_and_is_a_crash_without_the_oom_killer_hint() -> None:
    r = classify(Trigger.EXITED, -signal.SIGKILL, CRASH)
    assert (r.kind, r.signal, r.exit_code) == (ExitKind.CRASH, 9, None)
    assert "OOM killer" not in r.detail
    assert r.detail.startswith("killed by signal 9 (SIGKILL) after: ")
    assert "an illegal memory access" in r.detail


# sglang/srt/entrypoints/engine.py launch_phase_sigquit_handler: the launcher's line while loading.
LAUNCH_SIGQUIT = ("[2026-12-04 03:01:02] Received sigquit from a child process. It usually means "
                  "the child failed.")


@pytest.mark.parametrize("lines, evidence", [
    ([SUBPROCESS, CRASH[5]], SUBPROCESS),
    # Only the launcher's line survived (the scheduler's went to a rotated file).
    ([CRASH[5]], CRASH[5]),
    ([LAUNCH_SIGQUIT], LAUNCH_SIGQUIT),
])
def test_subprocess_crashed_and_sigquit_alone_are_crashes(lines: list[str], evidence: str) -> None:
    r = classify(Trigger.EXITED, -signal.SIGKILL, lines)
    assert r.kind is ExitKind.CRASH and r.evidence == evidence and "OOM killer" not in r.detail


def test_sglang_watchdog_timeout_is_a_hang_whatever_ends_it() -> None:
    r = classify(Trigger.EXITED, -signal.SIGKILL, [WATCHDOG, CRASH[5], CRASH[6]])
    assert r.kind is ExitKind.HANG and r.evidence == WATCHDOG and r.signal == 9
    assert classify(Trigger.HEALTH, -15, [WATCHDOG], "probes failed").kind is ExitKind.HANG
    # The soft watchdog only dumps state; the server lives on.
    assert classify(Trigger.EXITED, -9, [SOFT_WATCHDOG]).kind is ExitKind.CRASH


@pytest.mark.parametrize("error", [UNRECOGNIZED, AMBIGUOUS, BAD_CHOICE])
def test_argparse_refusal_with_exit_2_is_a_config_error(error: str) -> None:
    r = classify(Trigger.EXITED, 2, [USAGE, error])
    assert r.kind is ExitKind.CONFIG and r.evidence == error and r.exit_code == 2
    assert r.detail == f"launch flags refused: {error}"


def test_argparse_looking_lines_without_exit_2_are_not_config_errors() -> None:
    assert classify(Trigger.EXITED, 1, [USAGE, UNRECOGNIZED]).kind is ExitKind.CRASH
    # A log record that merely quotes such words is not argparse's line.
    assert classify(Trigger.EXITED, 2, [T + "x: error: unrecognized arguments: y"]).kind \
        is ExitKind.CRASH


def test_sigkill_without_any_line_is_a_crash_with_a_hint() -> None:
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


# Python 3.11's own lines, as printed by `python3 /nonexistent/launch.py`,
# `python3 -m sglang.launch_server` without SGLang, and `-m` of a missing top-level module.
CANNOT_RUN = [
    ("/usr/bin/python3: can't open file '/opt/x/launch.py': [Errno 2] No such file or "
     "directory", 2),
    ("/usr/bin/python3: Error while finding module specification for 'sglang.launch_server' "
     "(ModuleNotFoundError: No module named 'sglang')", 1),
    ("/usr/bin/python3: No module named sglang_router", 1),
    ("ModuleNotFoundError: No module named 'sgl_kernel'", 1),
]


@pytest.mark.parametrize("line, code", CANNOT_RUN)
def test_a_command_python_cannot_run_is_a_config_error(line: str, code: int) -> None:
    lines = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', line] \
        if line.startswith("ModuleNotFoundError") else [line]
    r = classify(Trigger.EXITED, code, lines)
    assert r.kind is ExitKind.CONFIG and r.evidence == line and r.exit_code == code
    assert r.detail.startswith(f"the launch command cannot run (exited with code {code}): ")


def test_missing_module_lines_in_log_records_or_signal_deaths_are_not_config_errors() -> None:
    # SGLang logs the optional imports it falls back from; a death by signal is not the
    # interpreter refusing to run.
    record = T + "WARNING: ModuleNotFoundError: No module named 'vllm', falling back"
    assert classify(Trigger.EXITED, 1, [record]).kind is ExitKind.CRASH
    assert classify(Trigger.EXITED, -9, [CANNOT_RUN[3][0]]).kind is ExitKind.CRASH
    assert classify(Trigger.EXITED, 0, [CANNOT_RUN[2][0]]).kind is ExitKind.CRASH


@pytest.mark.parametrize("trigger", [Trigger.PROGRESS, Trigger.HEALTH])
def test_our_stop_of_a_hung_server_is_not_its_crash(trigger: Trigger) -> None:
    # Seen on the real SGLang 0.5.23 CPU server: the daemon SIGTERMs a server it found hung,
    # and the launcher reports the children that signal ended before it exits.
    lines = ["[2026-12-05 23:21:10] Subprocess detokenizer (pid=4076) crashed with exit code "
             "-15. Triggering SIGQUIT for cleanup..."]
    reason = classify(trigger, -signal.SIGKILL, lines, "8 requests in flight, no token for 22 s")
    assert reason.kind is (ExitKind.STALL if trigger is Trigger.PROGRESS else ExitKind.HANG)
    assert reason.detail == "8 requests in flight, no token for 22 s"
    # A child that died of itself before we acted is still the crash it is.
    own = ["Subprocess scheduler_0 (pid=11) crashed with exit code 1. Triggering SIGQUIT ..."]
    assert classify(trigger, -signal.SIGKILL, own, "stalled").kind is ExitKind.CRASH


def test_a_crash_reason_is_one_short_line_and_the_traceback_stays_evidence() -> None:
    """No record time, no traceback header, no module path in the reason; evidence keeps all."""
    lines = ["[2026-12-06 14:50:52 TP0] Scheduler hit an exception: Traceback (most recent "
             "call last):", '  File "/x/faults.py", line 9, in crash',
             "supervisor.sim.faults.SimulatedCrash: Simulated scheduler crash: CUDA error: an "
             "illegal memory access was encountered"]
    r = classify(Trigger.EXITED, -signal.SIGKILL, lines)
    assert r.detail == ("killed by signal 9 (SIGKILL) after: Scheduler hit an exception: "
                        "SimulatedCrash: Simulated scheduler crash: CUDA error: an illegal "
                        "memory access was encountered")
    assert r.evidence is not None and "Traceback" in r.evidence and "14:50:52" in r.evidence


def test_a_death_the_supervisor_did_not_cause_says_so() -> None:
    """`killed by signal 9` alone reads as the supervisor's doing; the line says it was not."""
    assert describe_unasked_exit(-9) == ("ended on its own (killed by signal 9 (SIGKILL), "
                                         "not sent by the supervisor)")
    assert describe_unasked_exit(1) == "ended on its own (exited with code 1)"
