"""Launch flags put to SGLang's own parser before any launch, in a real child process: a
stand-in `sglang` package (tests/fixtures/fake_sglang) on the child's PYTHONPATH plays the
installed SGLang, so argparse's own judgement (abbreviations, choices, types) is what is
tested; without it on the path, the check is skipped with a line saying so."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from supervisor.commands import check
from supervisor.config import ConfigError, ServersSection
from supervisor.servers.flag_gate import require_accepted_flags, sglang_verdict
from supervisor.sglang.flag_check import FlagVerdict, argparse_error, sglang_launcher
from tests.fixtures import REPO

FAKE_SGLANG = Path(__file__).resolve().parents[1] / "fixtures" / "fake_sglang"
SGLANG = (sys.executable, "-m", "sglang.launch_server")
AMBIGUOUS = ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
             "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")


def _env(with_sglang: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if with_sglang:
        env["PYTHONPATH"] = str(FAKE_SGLANG)
    return env


def _servers(flags: dict, command: tuple[str, ...] = SGLANG) -> ServersSection:
    return ServersSection(count=2, model_path="/models/m", base_port=30000, command=command,
                          flags=flags)


def test_flags_sglangs_parser_takes_are_accepted() -> None:
    v = sglang_verdict(_servers({"mem-fraction-static": 0.88, "cuda-graph-max-bs-decode": 64,
                              "reasoning-parser": "qwen3", "enable-metrics": True,
                              "max-running": 48}), _env())
    # "--max-running" is an abbreviation argparse takes, as SGLang's own parser would.
    assert v.accepted is True and not v.refused, v.detail
    assert v.detail == f"SGLang's parser ({sys.executable}) accepts all 5 flags"
    assert {"--cuda-graph-max-bs-decode", "--model-path", "--reasoning-parser"} <= set(v.options)


@pytest.mark.parametrize("flags, error", [
    ({"cuda-graph-max-bs": 8}, AMBIGUOUS),
    ({"max-mamba-cache-slots": 160},
     "sglang serve: error: unrecognized arguments: --max-mamba-cache-slots 160"),
    ({"reasoning-parser": "qwen9"}, "sglang serve: error: argument --reasoning-parser: "
     "invalid choice: 'qwen9' (choose from 'auto', 'deepseek-r1', 'qwen3')"),
    ({"context-length": "long"}, "sglang serve: error: argument --context-length: "
     "invalid int value: 'long'"),
])
def test_flags_it_refuses_come_back_with_argparses_line(flags: dict, error: str) -> None:
    v = sglang_verdict(_servers(flags), _env())
    assert v.refused and v.detail == error


def test_tp_size_and_leading_command_arguments_reach_the_parser() -> None:
    # servers.tp_size becomes --tp-size; arguments written into the command itself count too.
    v = sglang_verdict(replace(_servers({}, (*SGLANG, "--enable-metrics")), tp_size=2), _env())
    assert v.accepted is True, v.detail
    v = sglang_verdict(_servers({}, (*SGLANG, "--no-such-thing")), _env())
    assert v.refused and v.detail == "sglang serve: error: unrecognized arguments: --no-such-thing"


def test_without_sglang_for_that_python_the_check_is_skipped() -> None:
    v = sglang_verdict(_servers({"cuda-graph-max-bs": 8}), _env(with_sglang=False))
    assert v.accepted is None and v.detail == f"SGLang is not installed for {sys.executable}"


def test_a_command_not_shaped_like_sglangs_launcher_is_not_run() -> None:
    def runner(*args: object, **kw: object) -> subprocess.CompletedProcess:
        raise AssertionError("nothing may be run for a command of another shape")

    for command in ((sys.executable, "-m", "supervisor.sim"), ("/opt/wrap.sh",),
                    ("python", "-m", "sglang.bench_serving")):
        v = sglang_verdict(_servers({}, command), runner=runner)
        assert v.accepted is None and "is not SGLang's launcher" in v.detail
    v = sglang_verdict(_servers({}, ("/no/such/python3", "-m", "sglang.launch_server")))
    assert v.accepted is None and v.detail == "'/no/such/python3' not found"


def test_sglang_serve_runs_under_its_scripts_interpreter(tmp_path: Path) -> None:
    script = tmp_path / "sglang"
    script.write_text(f"#!{sys.executable}\nprint('serve')\n")
    script.chmod(0o755)
    assert sglang_launcher((str(script), "serve", "--enable-metrics")) == (
        sys.executable, ["--enable-metrics"])
    script.write_text("#!/usr/bin/env python3\n")
    assert sglang_launcher((str(script), "serve")) == ("python3", [])
    script.write_text("#!/bin/sh\n")
    assert sglang_launcher((str(script), "serve")) is None
    v = sglang_verdict(_servers({"cuda-graph-max-bs": 8}, (str(tmp_path / "sglang"), "serve")))
    assert v.accepted is None


def test_a_parser_that_crashes_or_hangs_is_not_a_refusal(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    (broken / "sglang" / "srt").mkdir(parents=True)
    (broken / "sglang" / "__init__.py").write_text("")
    (broken / "sglang" / "srt" / "__init__.py").write_text("")
    (broken / "sglang" / "srt" / "server_args.py").write_text("import torch_is_missing_here\n")
    v = sglang_verdict(_servers({}), {**_env(), "PYTHONPATH": str(broken)})
    assert v.accepted is None
    assert v.detail.startswith("SGLang's parser exited with 1: ModuleNotFoundError")

    def slow(*args: object, **kw: object) -> subprocess.CompletedProcess:
        raise subprocess.TimeoutExpired("python", 60)

    assert sglang_verdict(_servers({}), runner=slow).accepted is None


def test_argparse_error_is_the_last_error_line() -> None:
    assert argparse_error("usage: sglang serve [-h]\n" + AMBIGUOUS + "\n") == AMBIGUOUS
    assert argparse_error("Traceback (most recent call last):\nValueError: x\n") is None


def test_at_daemon_start_a_refusal_is_a_config_error_and_a_skip_a_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError) as exc:
        require_accepted_flags(_servers({"cuda-graph-max-bs": 8}), _env())
    assert str(exc.value) == (f"servers.flags: the installed SGLang refuses the launch flags: "
                              f"{AMBIGUOUS} (fix or remove them; `dflash-supervisor check` "
                              "lists close names)")
    caplog.set_level(logging.INFO, logger="supervisor.servers")
    require_accepted_flags(_servers({"cuda-graph-max-bs": 8}), _env(with_sglang=False))
    require_accepted_flags(_servers({}, (sys.executable, "-m", "supervisor.sim")))
    assert [r.getMessage() for r in caplog.records] == [
        f"launch flags not checked before launch: SGLang is not installed for {sys.executable}",
        f"launch flags not checked before launch: launch command {sys.executable!r} is not "
        "SGLang's launcher (python -m sglang.launch_server or sglang serve)"]


def test_check_reports_sglangs_refusal_and_the_close_names(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "job.toml"
    config.write_text(f'[generation]\nenable_thinking = false\n[servers]\ncount = 1\n'
                      f'model_path = "/models/m"\ncommand = ["{sys.executable}", "-m", '
                      f'"sglang.launch_server"]\nflags = {{ cuda-graph-max-bs = 8 }}\n')
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')   # `check` wants it there
    rc = check.main(["--config", str(config)],
                    flag_checker=lambda cfg: sglang_verdict(cfg.servers, _env()))
    err = capsys.readouterr().err
    assert rc == 1
    assert f"servers.flags: SGLang's parser refuses them: {AMBIGUOUS}" in err
    assert "servers.flags.cuda-graph-max-bs: --cuda-graph-max-bs is not accepted by the launch " \
           "command (did you mean --cuda-graph-max-bs-decode?)" in err
    ok = check.main(["--config", str(config)],
                    flag_checker=lambda cfg: FlagVerdict(True, "accepted by the parser"))
    assert ok == 0 and "flags OK: accepted by the parser" in capsys.readouterr().out


def test_run_refuses_to_start_with_flags_sglang_refuses(tmp_path: Path) -> None:
    # The daemon's own start, as systemd runs it: one line, exit 2, no server launched.
    config = tmp_path / "job.toml"
    config.write_text(f'[generation]\nenable_thinking = false\n[servers]\ncount = 1\n'
                      f'model_path = "/models/m"\ncommand = ["{sys.executable}", "-m", '
                      f'"sglang.launch_server"]\nflags = {{ cuda-graph-max-bs = 8 }}\n')
    out = subprocess.run([sys.executable, "-m", "supervisor", "run", "--config", str(config)],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**_env(), "PYTHONPATH": f"{FAKE_SGLANG}{os.pathsep}{REPO}"},
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert (f"dflash-supervisor: invalid config: servers.flags: the installed SGLang refuses the "
            f"launch flags: {AMBIGUOUS}") in out.stderr
    assert not (tmp_path / "job.db").exists()
