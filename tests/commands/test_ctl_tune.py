"""`ctl tune start/stop` as a script and a person type them: the request each command line
builds, the one-line refusals of a bad search space (exit 2) and of a missing daemon (69),
the answers' lines, and the status report's tuning lines."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from supervisor.client.exit_codes import EXIT_UNREACHABLE, EXIT_USAGE
from supervisor.client.flag_space import SpaceSyntaxError, parse_space, space_text
from supervisor.client.text import report, result_text
from supervisor.commands.ctl import _BY_NAME, build_parser, request_of
from supervisor.contract.status import Flag
from supervisor.contract.tuning import (
    FlagRange,
    TuneStartRequest,
    TuneStartResult,
    TuneState,
    TuneStopRequest,
    TuneStopResult,
    Tuning,
)
from tests.fixtures import tui_status_data as data

MRR = FlagRange("max-running-requests", (32, 48, 64))
MFS = FlagRange("mem-fraction-static", (0.9, 0.93))


def parsed(*argv: str) -> tuple[str, object]:
    args = build_parser().parse_args(list(argv))
    endpoint = _BY_NAME[getattr(args, "entry", None) or args.action]
    return endpoint.name, request_of(endpoint, args)


@pytest.mark.parametrize("argv,request_", [
    (["tune", "start"], TuneStartRequest()),
    (["tune-start"], TuneStartRequest()),
    (["tune", "start", "--space", "max-running-requests=32,48,64"], TuneStartRequest((MRR,))),
    (["tune", "start", "--space", "max-running-requests=32,48,64", "mem-fraction-static=0.9,0.93",
      "--server", "gpu1", "--max-trials", "5", "--force"],
     TuneStartRequest((MRR, MFS), "gpu1", 5, True)),
    (["tune-start", "--space", "max-running-requests=32,48,64", "--space",
      "mem-fraction-static=0.9,0.93"], TuneStartRequest((MRR, MFS))),
    (["tune", "start", "--space", "enable-mixed-chunk=true,false", "attention-backend=fa3,triton"],
     TuneStartRequest((FlagRange("enable-mixed-chunk", (True, False)),
                       FlagRange("attention-backend", ("fa3", "triton"))))),
], ids=["default", "table-name", "one-flag", "everything", "space-twice", "switch-and-text"])
def test_tune_start_builds_the_request(argv: list[str], request_: TuneStartRequest) -> None:
    assert parsed(*argv) == ("tune-start", request_)


@pytest.mark.parametrize("argv", [["tune", "stop"], ["tune-stop"]])
def test_tune_stop_builds_the_request(argv: list[str]) -> None:
    assert parsed(*argv) == ("tune-stop", TuneStopRequest())


def test_values_are_typed_as_the_retune_dialog_types_them() -> None:
    (r,) = parse_space("max-running-requests=48,64.0,x,TRUE")
    assert r.values == (48, 64.0, "x", True)
    assert [type(v) for v in r.values] == [int, float, str, bool]
    assert space_text((MRR, MFS)) == "max-running-requests=32,48,64 mem-fraction-static=0.9,0.93"
    assert parse_space(space_text((MRR, MFS))) == (MRR, MFS)
    assert parse_space("   ") == ()


@pytest.mark.parametrize("text,error", [
    ("max-running-requests", "'max-running-requests': expected FLAG=V1,V2,..."),
    ("=32,48", "'=32,48': expected FLAG=V1,V2,..."),
    ("max-running-requests=", "'max-running-requests=': an empty value in the list"),
    ("max-running-requests=32,,64", "an empty value in the list for max-running-requests"),
    ("max-running-requests=32,32", "a value given twice for max-running-requests"),
    ("a=1 a=2", "a: given twice in the search space"),
    ("a='1", "cannot split"),
])
def test_a_malformed_space_is_one_line_naming_it(text: str, error: str) -> None:
    with pytest.raises(SpaceSyntaxError) as caught:
        parse_space(text)
    assert error in str(caught.value) and "\n" not in str(caught.value)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor", "ctl", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args,error", [
    (["tune", "start", "--space", "max-running-requests=32,,64"],
     "argument --space: 'max-running-requests=32,,64': an empty value in the list"),
    (["tune", "start", "--space", "max-running-requests"],
     "argument --space: 'max-running-requests': expected FLAG=V1,V2"),
    (["tune", "start", "--space", "a=1", "--space", "a=2"],
     "argument --space: a: given twice in the search space"),
    (["tune", "start", "--max-trials", "0"],
     "argument --max-trials: expected a whole number of trials above 0, got '0'"),
    (["tune"], "required: start|stop"),
])
def test_bad_command_lines_exit_2_with_one_line(args: list[str], error: str,
                                                tmp_path: Path) -> None:
    r = cli("--socket", str(tmp_path / "none.sock"), *args)
    assert r.returncode == EXIT_USAGE, (r.stdout, r.stderr)
    assert error in r.stderr.splitlines()[-1] and "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [["tune", "start", "--space", "max-running-requests=32,48"],
                                  ["tune", "stop"]])
def test_no_daemon_is_its_own_exit_code(args: list[str], tmp_path: Path) -> None:
    r = cli("--socket", str(tmp_path / "none.sock"), *args)
    assert r.returncode == EXIT_UNREACHABLE and "no daemon answers on" in r.stderr


def test_the_answers_lines() -> None:
    started = TuneStartResult(state=TuneState.WAITING, canary="gpu1", space=(MRR,),
                              reason="tuning gpu1: waiting for every server to be READY",
                              max_trials=8)
    assert result_text(started) == (
        "tuner waiting: tuning gpu1: waiting for every server to be READY (canary gpu1, up "
        "to 8 trials over max-running-requests=32,48,64)")
    refused = TuneStartResult(state=TuneState.NOT_WORTH_IT, canary=None, space=(),
                              reason="job ends in 40 min: not tuning", max_trials=8)
    assert result_text(refused) == ("tuner not-worth-it: job ends in 40 min: not tuning (up "
                                    "to 8 trials over the default space)")
    stopped = TuneStopResult(was=TuneState.TRIAL, trials_done=3,
                             best=(Flag("max-running-requests", 48),
                                   Flag("enable-metrics", True)))
    assert result_text(stopped) == ("tuner stopped (was trial) after 3 trials; best: "
                                    "max-running-requests=48 enable-metrics=true")
    assert "best: the flags it started from" in result_text(replace(stopped, best=()))


def test_status_report_tuning_lines() -> None:
    s = data.tuning()
    lines = report(s, "/run/x.sock").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("tuning   "))
    assert lines[at] == ("tuning   TRIAL, canary gpu2, trial 4/8, best +41.3% per GPU: trying "
                         "mem-fraction-static 0.88 -> 0.9 on gpu2: measuring, 212 s of 600 s")
    assert lines[at + 1] == ("         best flags max-running-requests=48 "
                             "max-mamba-cache-size=200 mem-fraction-static=0.88")
    assert s.tuning is not None
    between = replace(s.tuning, state=TuneState.MEASURING, weak=True, best=())
    text = report(replace(s, tuning=between), "x")
    assert "MEASURING, canary gpu2, 3/8 trials," in text and "before vs after only" in text
    assert "best flags" not in text
    done = replace(s.tuning, state=TuneState.DONE, trials_left=0, reason="no step helps")
    assert "DONE, canary gpu2, 3 trials, best +41.3% per GPU: no step helps" in report(
        replace(s, tuning=done), "x")


def test_waiting_before_any_trial_is_planned() -> None:
    waiting = Tuning(state=TuneState.WAITING, canary="gpu1",
                     reason="tuning gpu1: waiting for every server to be READY")
    assert ("tuning   WAITING, canary gpu1, no trials, nothing kept yet: tuning gpu1: waiting "
            "for every server to be READY") in report(replace(data.healthy(), tuning=waiting), "x")


@pytest.mark.parametrize("tuning", [None, Tuning()], ids=["no-tuner", "never-started"])
def test_no_tuning_line_without_a_search(tuning: Tuning | None) -> None:
    assert "tuning " not in report(replace(data.healthy(), tuning=tuning), "x")
