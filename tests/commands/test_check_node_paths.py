"""`check` finds what the config names that is not on this node: an error where the daemon
would fail at start, a warning where it may appear before the servers start, a note for a
model SGLang fetches from the hub, and a line when the GPU indices could not be checked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from supervisor.commands import check
from supervisor.gpu.nvml_source import node_gpu_count


def _check(tmp_path: Path, servers: str, capsys: pytest.CaptureFixture[str],
           prompts: bool = True) -> tuple[int, str, str]:
    if prompts:
        (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    path = tmp_path / "job.toml"
    path.write_text(f'[generation]\nenable_thinking = false\n[servers]\ncount = 1\n{servers}\n')
    rc = check.main(["--config", str(path), "--skip-flag-check"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_what_the_daemon_needs_at_start_is_an_error_each(tmp_path: Path, capsys):
    (tmp_path / "a-file").write_text("")
    rc, out, err = _check(tmp_path, 'model_path = "/nowhere/models/m"\n'
                                     'command = ["/nowhere/bin/python", "-m", "sglang.launch_server"]\n'
                                     'log_dir = "a-file/logs"', capsys, prompts=False)
    assert rc == 2
    assert f"config error: job.prompts: {tmp_path / 'prompts.jsonl'} does not exist" in err
    assert "config error: servers.command: /nowhere/bin/python does not exist" in err
    assert f"config error: servers.log_dir: {tmp_path / 'a-file' / 'logs'} cannot be made: " \
           f"{tmp_path / 'a-file'} is a file" in err
    assert "warning: servers.model_path: /nowhere/models/m does not exist here" in err
    assert "config OK" not in out and "config NOT OK" in out
    # The command lines are still shown: they are what would run.
    assert "/nowhere/bin/python -m sglang.launch_server --model-path /nowhere/models/m" in out


def test_a_hub_id_is_fetched_by_sglang_not_refused(tmp_path: Path, capsys):
    rc, out, err = _check(tmp_path, f'model_path = "Qwen/Qwen3-8B"\n'
                                    f'command = ["{sys.executable}", "-m", "sglang.launch_server"]',
                          capsys)
    assert rc == 0, err
    assert ("servers.model_path: Qwen/Qwen3-8B is not a local directory: SGLang fetches it "
            "from the model hub at start") in out
    assert "model_path" not in err


def test_a_present_model_directory_and_command_say_nothing(tmp_path: Path, capsys):
    (tmp_path / "model").mkdir()
    rc, out, err = _check(tmp_path, f'model_path = "{tmp_path / "model"}"\n'
                                    f'command = ["{sys.executable}", "-m", "sglang.launch_server"]',
                          capsys)
    assert rc == 0, err
    assert "model_path" not in out + err and "servers.command" not in err


def test_gpu_indices_not_checked_without_nvml_are_said(tmp_path: Path, capsys,
                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rc, out, err = _check(tmp_path, f'model_path = "Qwen/Qwen3-8B"\n'
                                    f'command = ["{sys.executable}", "-m", "sglang.launch_server"]',
                          capsys)
    assert rc == 0, err
    said = "warning: servers: GPU indices 0 not checked: no NVML here" in err
    assert said == (node_gpu_count() is None)
