"""`dflash-supervisor serve-server`, what a server unit runs, on real child processes: it execs
the spec's argv with the spec's environment (the unit's own systemd variables winning), its
output appended to the log; --record-exit keeps systemd's account of the end; a missing or
malformed spec is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.servers.unit_spec import (
    UnitExit,
    UnitSpec,
    exit_path,
    read_exit,
    read_spec,
    write_spec,
)

SERVE = [sys.executable, "-m", "supervisor", "serve-server"]

# What the "server" does: say who it is, then exit with a chosen status.
SHOW = ("import json, os, sys; print(json.dumps({'pid': os.getpid(), 'argv': sys.argv[1:], "
        "'cwd': os.getcwd(), 'env': dict(os.environ)}), flush=True); sys.exit(7)")


def _serve(spec: Path, env: dict[str, str] | None = None, *extra: str
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVE, "--spec", str(spec), *extra], capture_output=True,
                          text=True, timeout=60, env=env)


def test_execs_the_spec_with_its_environment_into_the_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "gpu3.log"
    log.parent.mkdir()
    log.write_text("an earlier life\n")
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "3", "DFLASH_JOB_TOKEN": "t-42",
           "INVOCATION_ID": "the-daemons", "PYTHONPATH": str(Path.cwd())}
    spec = write_spec(tmp_path / "servers", UnitSpec("gpu3", (sys.executable, "-c", SHOW,
                                                              "--port", "30003"), env,
                                                     str(log), str(tmp_path)))
    assert spec == tmp_path / "servers" / "gpu3.json"
    assert spec.stat().st_mode & 0o777 == 0o600        # the token is in there
    out = _serve(spec, {"PATH": "/usr/bin:/bin", "INVOCATION_ID": "the-units-own",
                        "PYTHONPATH": str(Path.cwd())})
    assert out.returncode == 7, out.stderr             # the server's own status: it was exec'd
    assert out.stdout == "" and out.stderr == ""       # everything went to the log
    lines = log.read_text().splitlines()
    assert lines[0] == "an earlier life"               # appended, not truncated
    seen = json.loads(lines[1])
    assert seen["argv"] == ["--port", "30003"] and seen["cwd"] == str(tmp_path)
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "3"
    assert seen["env"]["DFLASH_JOB_TOKEN"] == "t-42"
    assert seen["env"]["INVOCATION_ID"] == "the-units-own"


def test_record_exit_keeps_systemds_account(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, UnitSpec("gpu0", ("true",)))
    env = {"INVOCATION_ID": "abc", "SERVICE_RESULT": "oom-kill", "EXIT_CODE": "killed",
           "EXIT_STATUS": "KILL", "PYTHONPATH": str(Path.cwd())}
    assert _serve(spec, env, "--record-exit").returncode == 0
    record = read_exit(exit_path(spec))
    assert record == UnitExit("abc", "oom-kill", "killed", "KILL")
    assert record is not None and record.returncode == -9


@pytest.mark.parametrize("code,status,returncode", [
    ("exited", "0", 0), ("exited", "3", 3), ("killed", "TERM", -15), ("dumped", "ABRT", -6),
    ("killed", "9", -9), ("", "", None), ("killed", "NOSUCH", None)])
def test_exit_as_popen_says_it(code: str, status: str, returncode: int | None) -> None:
    assert UnitExit("i", "r", code, status).returncode == returncode


@pytest.mark.parametrize("content,problem", [
    (None, "no such spec file"),
    ("{not json", "unreadable spec file"),
    ('{"version": 99, "name": "gpu0", "argv": ["x"]}', "spec version 99"),
    ('{"version": 1, "name": "gpu0", "argv": []}', "argv must be a non-empty list"),
    ('{"version": 1, "name": "gpu0", "argv": ["x"], "env": {"A": 1}}', "env must map"),
])
def test_a_bad_spec_is_one_line_and_exit_2(tmp_path: Path, content: str | None,
                                            problem: str) -> None:
    spec = tmp_path / "gpu0.json"
    if content is not None:
        spec.write_text(content)
    out = _serve(spec)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and problem in out.stderr, out.stderr
    assert str(spec) in out.stderr


def test_a_command_that_cannot_run_says_so_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "gpu1.log"
    spec = write_spec(tmp_path, UnitSpec("gpu1", ("/no/such/python", "-m", "sglang"),
                                         {"PATH": "/usr/bin"}, str(log)))
    out = _serve(spec)
    assert out.returncode == 127
    assert "gpu1: could not start '/no/such/python'" in log.read_text()


def test_spec_round_trip(tmp_path: Path) -> None:
    spec = UnitSpec("gpu2-3", ("python", "-m", "sglang.launch_server"), {"A": "b"}, "/l", None)
    assert read_spec(write_spec(tmp_path, spec)) == spec


def test_an_oom_kill_seen_by_systemd_makes_the_death_an_oom(tmp_path: Path) -> None:
    from supervisor.servers.exit_classifier import ExitKind, Trigger, classify

    log = tmp_path / "gpu0.log"
    log.write_text("[TP0] decode batch ...\n")
    spec = write_spec(tmp_path, UnitSpec("gpu0", ("true",), {}, str(log)))
    env = {"INVOCATION_ID": "abc", "SERVICE_RESULT": "oom-kill", "EXIT_CODE": "killed",
           "EXIT_STATUS": "KILL", "PYTHONPATH": str(Path.cwd())}
    assert _serve(spec, env, "--record-exit").returncode == 0
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and "Result=oom-kill" in lines[1]
    reason = classify(Trigger.EXITED, -9, lines, "")
    assert reason.kind is ExitKind.OOM and "OOM killer" in reason.evidence
    # Any other end leaves the log as it was.
    env["SERVICE_RESULT"] = "signal"
    _serve(spec, env, "--record-exit")
    assert log.read_text().splitlines() == lines
