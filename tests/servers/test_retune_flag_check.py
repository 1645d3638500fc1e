"""A retune or a reload puts its new flags to the installed SGLang's parser before any server
is stopped: flags it refuses restart nothing (a roll would stop at its first server, a server
down for flags it cannot start with). Real processes: the servers' command is `python -m
sglang.launch_server`, where a stand-in `sglang` package (written per test) parses with the
simulator's copy of SGLang 0.5.23's parser and then runs the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from supervisor.config import ConfigError, ServersSection
from supervisor.job.main_loop import Job
from supervisor.servers.flag_gate import require_accepted_retune
from supervisor.servers.server_state import ServerState
from tests.fixtures import REPO
from tests.fixtures.real_job import (
    assert_every_prompt_once,
    completed_on,
    job_config,
    query,
    run_job,
    transitions,
    wait_fleet,
    wait_for,
)

AMBIGUOUS = ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
             "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")

_SERVER_ARGS = '''
from supervisor.sim.options import _sim_parser
from supervisor.sim.sglang_parser import sglang_parser


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        # SGLang 0.5.23's flags (the simulator's generated table), and the simulator's own.
        for source in (sglang_parser(), _sim_parser()):
            for action in source._actions:
                if action.option_strings and "-h" not in action.option_strings:
                    parser._add_action(action)
'''
_LAUNCH = "import runpy\nrunpy.run_module('supervisor.sim', run_name='__main__')\n"


def _sglang_env(tmp: Path) -> dict[str, str]:
    pkg = tmp / "as_sglang" / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "srt" / "__init__.py").write_text("")
    (pkg / "srt" / "server_args.py").write_text(_SERVER_ARGS)
    (pkg / "launch_server.py").write_text(_LAUNCH)
    return {**os.environ, "PYTHONPATH": f"{pkg.parent}{os.pathsep}{REPO}"}


def test_one_parser_run_per_distinct_flag_set_and_a_refusal_raises(tmp_path: Path) -> None:
    env = _sglang_env(tmp_path)
    runs: list[list[str]] = []

    def runner(argv, **kw):
        runs.append(argv)
        return subprocess.run(argv, **kw)

    ok = ServersSection(count=2, model_path="/m", base_port=30000,
                        command=(sys.executable, "-m", "sglang.launch_server"),
                        flags={"max-running-requests": 8})
    anyio.run(lambda: require_accepted_retune([ok, replace(ok), ok], env, runner))
    assert len(runs) == 1
    bad = replace(ok, flags={"cuda-graph-max-bs": 8})
    with pytest.raises(ConfigError, match="ambiguous option: --cuda-graph-max-bs could match"):
        anyio.run(lambda: require_accepted_retune([ok, bad], env, runner))
    assert len(runs) == 3


async def test_a_retune_sglang_refuses_restarts_no_server_and_says_why(tmp_path: Path) -> None:
    env = _sglang_env(tmp_path)
    prompts = 300
    cfg = job_config(tmp_path, servers=2, prompts=prompts,
                     command=[sys.executable, "-m", "sglang.launch_server"])
    seen = {}

    async def operate(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: all(completed_on(job, n) >= 5 for n in ("gpu0", "gpu1")),
                       "both serving")
        seen["refused"] = await fleet.retune({"cuda-graph-max-bs": 8}, None, "alice")
        seen["states"] = {n: s.state for n, s in fleet.servers.items()}
        seen["accepted"] = await fleet.retune({"max-running-requests": 4}, "gpu1", "alice")

    _, result = await run_job(cfg, operate, base_env=env, timeout_s=90)
    assert_every_prompt_once(cfg, result, prompts)
    refused = seen["refused"]
    assert not refused.ok and refused.restarted == () and refused.aborted_at == "gpu0"
    assert AMBIGUOUS in refused.reason and "no server was restarted" in refused.reason
    assert set(seen["states"].values()) == {ServerState.READY}
    assert seen["accepted"].ok and seen["accepted"].restarted == ("gpu1",)
    # The refusal is audited with argparse's line; gpu0 never left READY until the end.
    rows = query(cfg, "SELECT json_extract(detail, '$.refused') FROM events "
                      "WHERE kind = 'server_retune' ORDER BY id")
    assert AMBIGUOUS in rows[0][0] and rows[1][0] is None
    assert [t.to for t in transitions(cfg, "gpu0")] == ["STARTING", "READY", "STOPPING",
                                                        "STOPPED"]


def test_a_reload_with_flags_sglang_refuses_is_refused_whole(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from supervisor.job.reload import _require_accepted_flags
    from supervisor.job.reload_plan import ReloadRefused, plan_reload

    env = _sglang_env(tmp_path)
    old = job_config(tmp_path, servers=2, prompts=1,
                     command=[sys.executable, "-m", "sglang.launch_server"])
    fleet = SimpleNamespace(options=SimpleNamespace(base_env=env))
    bad = replace(old, servers=replace(old.servers, flags={**old.servers.flags,
                                                           "cuda-graph-max-bs": 8}))
    with pytest.raises(ReloadRefused, match="ambiguous option.*; nothing applied"):
        anyio.run(_require_accepted_flags, fleet, bad, plan_reload(old, bad))
    good = replace(old, servers=replace(old.servers, flags={**old.servers.flags,
                                                            "max-running-requests": 3}))
    anyio.run(_require_accepted_flags, fleet, good, plan_reload(old, good))
