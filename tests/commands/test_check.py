from __future__ import annotations

import os
from pathlib import Path

import pytest

from supervisor.commands import check

CONFIG = """
[servers]
count = 2
model_path = "/models/nemotron"
base_port = 30100
flags = { mem-fraction-static = 0.88, max-running-requests = 64, enable-metrics = true, \
max-mamba-cache-size = 200, reasoning-parser = "qwen3" }
"""

HELP = """usage: launch_server.py [-h] --model-path MODEL_PATH [--host HOST] [--port PORT]
  --mem-fraction-static MEM_FRACTION_STATIC
  --max-running-requests MAX_RUNNING_REQUESTS, --max_running_requests
  --enable-metrics      Enable log prometheus metrics.
  --stream-interval STREAM_INTERVAL
  --max-mamba-cache-size MAX_MAMBA_CACHE_SIZE
  --reasoning-parser {auto,deepseek-r1,qwen3}
"""


def _write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "job.toml"
    p.write_text(text)
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')   # `check` wants it there
    return str(p)


def test_prints_each_server_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = check.main(["--config", _write(tmp_path, CONFIG)], help_provider=lambda cmd: HELP)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert ("CUDA_VISIBLE_DEVICES=1 python -m sglang.launch_server --model-path /models/nemotron "
            "--host 127.0.0.1 --port 30101 --stream-interval 16 --mem-fraction-static 0.88 "
            "--max-running-requests 64 "
            "--enable-metrics --max-mamba-cache-size 200 --reasoning-parser qwen3") in out
    assert "gpu0: GPUs 0, port 30100, 64 requests in flight" in out
    assert "flags OK" in out


def test_renamed_flag_is_reported_with_a_suggestion(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    old_help = HELP.replace("--max-mamba-cache-size", "--max-mamba-cache-slots")
    rc = check.main(["--config", _write(tmp_path, CONFIG)], help_provider=lambda cmd: old_help)
    err = capsys.readouterr().err
    assert rc == 1
    assert "servers.flags.max-mamba-cache-size" in err and "did you mean --max-mamba-cache-slots" in err


def test_help_provider_gets_the_launch_command(tmp_path: Path) -> None:
    seen = []
    check.main(["--config", _write(tmp_path, CONFIG)], help_provider=lambda c: seen.append(c) or HELP)
    assert seen == [("python", "-m", "sglang.launch_server")]


def test_invalid_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = check.main(["--config", _write(tmp_path, "[servers]\ncount = 2\n")])
    assert rc == 2 and "servers.model_path" in capsys.readouterr().err
    assert check.main(["--config", str(tmp_path / "missing.toml")]) == 2


def test_without_sglang_flags_are_not_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check.importlib.util, "find_spec", lambda name: None)
    assert check.main(["--config", _write(tmp_path, CONFIG)]) == 0
    assert "not installed" in capsys.readouterr().out


def test_real_help_of_a_python_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # run_help really runs `<command> --help`; an argparse program stands in for SGLang.
    prog = tmp_path / "fake_launch.py"
    prog.write_text("import argparse\np = argparse.ArgumentParser()\n"
                    "for f in ['--model-path', '--host', '--port', '--mem-fraction-static']:\n"
                    "    p.add_argument(f)\np.parse_args()\n")
    import sys
    text = check.run_help([sys.executable, str(prog)])
    assert {"--mem-fraction-static", "--port"} <= check.accepted_options(text)


def test_example_config_through_the_cli_prints_every_server_command() -> None:
    # The shipped example, exactly as an operator runs it before `systemctl start`.
    import importlib.util
    import shlex
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    # As on a node, not under a scheduler's CUDA_VISIBLE_DEVICES (which the GPUs index into).
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    out = subprocess.run([sys.executable, "-m", "supervisor", "check", "--config",
                          "systemd/example-config.toml"], cwd=repo, capture_output=True,
                         text=True, timeout=300, stdin=subprocess.DEVNULL, env=env)
    if Path("/opt/dflash-supervisor/bin/python").exists():
        if importlib.util.find_spec("sglang") is None:
            assert out.returncode == 0, out.stderr
            assert "flags not checked" in out.stdout
    else:
        # Off the node the launch command the example names is not there: the daemon could
        # not launch a server, and `check` says so instead of "config OK".
        assert out.returncode == 2, out.stderr
        assert ("config error: servers.command: /opt/dflash-supervisor/bin/python does not "
                "exist") in out.stderr
        assert "config OK" not in out.stdout
    commands = [line.strip() for line in out.stdout.splitlines() if line.startswith("  ")]
    assert len(commands) == 8
    for gpu, line in enumerate(commands):
        env, *argv = shlex.split(line)
        assert env == f"CUDA_VISIBLE_DEVICES={gpu}"
        # Absolute: under systemd the venv is on no PATH.
        assert argv == ["/opt/dflash-supervisor/bin/python", "-m", "sglang.launch_server",
                        "--model-path", "/models/hybrid-mamba-8b", "--host", "127.0.0.1",
                        "--port", str(30000 + gpu), "--stream-interval", "16",
                        "--mem-fraction-static", "0.88",
                        "--max-running-requests", "48", "--max-mamba-cache-size", "160",
                        "--context-length", "16384", "--reasoning-parser", "qwen3",
                        "--enable-metrics"]
        assert (f"gpu{gpu}: GPUs {gpu}, port {30000 + gpu}, 48 requests in flight, "
                f"log /var/log/dflash-supervisor/gpu{gpu}.log") in out.stdout


def test_without_the_flag_the_slots_are_the_servers_own(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    config = CONFIG.replace("max-running-requests = 64, ", "")
    assert check.main(["--config", _write(tmp_path, config), "--skip-flag-check"]) == 0
    assert ("gpu1: GPUs 1, port 30101, requests in flight as SGLang reports on /server_info, "
            "log ") in capsys.readouterr().out
