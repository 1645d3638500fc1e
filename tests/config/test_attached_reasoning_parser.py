"""An attach-only job with thinking on: `[servers.flags]` is never applied to an attached
server, so its reasoning parser is read from its own /server_info (a real simulated SGLang on
loopback): a server started with `--reasoning-parser` passes `check` and the start, one
without is refused by name, one not answering yet is not refused for what it has not said."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor.commands import check
from supervisor.config import parse_config
from tests.fixtures import REPO
from tests.fixtures.ports import free_port
from tests.fixtures.sim_servers import SimServer


def _config(tmp_path: Path, url: str) -> Path:
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    path = tmp_path / "job.toml"
    path.write_text(f'[generation]\nenable_thinking = true\n[servers]\ncount = 0\n'
                    f'attach = ["{url}"]\n')
    return path


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = check.main(["--config", str(path), "--skip-flag-check"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_an_attach_only_config_with_thinking_on_loads_without_flags():
    cfg = parse_config({"servers": {"count": 0, "attach": ["http://node7:30000"]},
                        "generation": {"enable_thinking": True}})
    assert cfg.servers.flags == {} and not cfg.servers.own_servers


def test_a_server_with_its_own_parser_passes(tmp_path: Path, capsys,
                                             sim_server: Callable[..., SimServer]):
    server = sim_server("--reasoning-parser", "qwen3")
    rc, out, err = _check(_config(tmp_path, server.base_url), capsys)
    assert rc == 0, err
    assert f"ext0 ({server.base_url}): reasoning parser qwen3 (its /server_info)" in out


def test_a_server_without_a_parser_is_refused_by_name(tmp_path: Path, capsys,
                                                      sim_server: Callable[..., SimServer]):
    server = sim_server()
    path = _config(tmp_path, server.base_url)
    rc, out, err = _check(path, capsys)
    assert rc == 2
    assert (f"config error: generation.enable_thinking = true, but attached server ext0 "
            f"({server.base_url}) runs without a reasoning parser") in err
    assert "config OK" not in out
    # The daemon's own start refuses it the same way: one line, exit 2.
    run = subprocess.run([sys.executable, "-m", "supervisor", "run", "--config", str(path)],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"attached server ext0 ({server.base_url}) runs without" in run.stderr


def test_a_server_not_answering_yet_is_not_refused(tmp_path: Path, capsys):
    url = f"http://127.0.0.1:{free_port()}"
    rc, out, err = _check(_config(tmp_path, url), capsys)
    assert rc == 0, err
    assert f"ext0 ({url}): reasoning parser not checked: /server_info" in out
