"""Under a scheduler (Slurm's --gres, Kubernetes' device plugin) the daemon is started with
CUDA_VISIBLE_DEVICES set: a server's GPUs index into that list instead of overwriting it with
the node's numbers, an index past the list is a config error at start, and NVML telemetry
reports the same devices under the same indices. Without the variable nothing changes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from supervisor.commands import check
from supervisor.config import ConfigError, check_gpus_exist, parse_config
from supervisor.gpu.nvml_source import NvmlSource
from supervisor.gpu.visible_devices import devices_for, visible_devices
from supervisor.servers.launch_command import build_env, build_specs
from tests.fixtures.real_job import job_config, run_job, wait_fleet, wait_for
from tests.gpu.fake_nvml import FakeNvml

UUIDS = ("GPU-5e2b1c0a-0000-0000-0000-000000000000", "GPU-9f3d2e1b-1111-1111-1111-111111111111")


def _cfg(**servers):
    return parse_config({"servers": {"model_path": "m", **servers},
                         "generation": {"enable_thinking": False}})


def test_the_list_is_read_as_written():
    assert visible_devices({}) is None
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ("2", "3")
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert visible_devices({"CUDA_VISIBLE_DEVICES": f"{UUIDS[1]},MIG-ab12"}) == (UUIDS[1],
                                                                                 "MIG-ab12")
    assert devices_for((0, 1), None) == ("0", "1")
    assert devices_for((1,), ("4", "6")) == ("6",)
    with pytest.raises(IndexError):
        devices_for((2,), ("4", "6"))


def test_a_servers_gpus_index_into_the_schedulers_list():
    specs = build_specs(_cfg(count=4, tp_size=2).servers)
    given = {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "PATH": "/bin"}
    assert [build_env(s, given)["CUDA_VISIBLE_DEVICES"] for s in specs] == ["4,5", "6,7"]
    one = build_specs(_cfg(gpus=[1]).servers)[0]
    assert build_env(one, {"CUDA_VISIBLE_DEVICES": ",".join(UUIDS)})["CUDA_VISIBLE_DEVICES"] \
        == UUIDS[1]
    # No list: the config's numbers are the node's GPUs, as before.
    assert build_env(one, {"PATH": "/bin"})["CUDA_VISIBLE_DEVICES"] == "1"


def test_an_index_past_the_list_is_refused_at_start_naming_the_list():
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    check_gpus_exist(_cfg(gpus=[0, 1]), 8, env)
    # The node's 8 GPUs do not matter: the job was given two.
    with pytest.raises(ConfigError) as exc:
        check_gpus_exist(_cfg(count=4), 8, env)
    assert str(exc.value) == ("servers.count: GPU 2, 3 is past CUDA_VISIBLE_DEVICES=2,3 "
                              "(2 GPUs: indices 0..1); under a scheduler the config's GPUs are "
                              "indices into its list")
    with pytest.raises(ConfigError, match=r"servers.gpus: GPU 1 is past CUDA_VISIBLE_DEVICES=5 "
                                          r"\(1 GPU: index 0\)"):
        check_gpus_exist(_cfg(gpus=[1]), None, {"CUDA_VISIBLE_DEVICES": "5"})
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES is set empty"):
        check_gpus_exist(_cfg(count=1), None, {"CUDA_VISIBLE_DEVICES": ""})
    # The simulator uses no GPU.
    check_gpus_exist(_cfg(count=3, command=[sys.executable, "-m", "supervisor.sim"]), None,
                     {"CUDA_VISIBLE_DEVICES": "0"})


def test_check_prints_the_schedulers_devices(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    path = tmp_path / "job.toml"
    path.write_text('[generation]\nenable_thinking = false\n'
                    '[servers]\ncount = 2\nmodel_path = "m"\n')
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')   # `check` wants it there
    assert check.main(["--config", str(path), "--skip-flag-check"]) == 0
    out = capsys.readouterr().out
    assert "gpu1: GPUs 1 (the scheduler's 7, from this shell's CUDA_VISIBLE_DEVICES)" in out
    assert "  CUDA_VISIBLE_DEVICES=7 python -m sglang.launch_server" in out
    path.write_text(path.read_text().replace("count = 2", "count = 3"))
    assert check.main(["--config", str(path), "--skip-flag-check"]) == 2
    assert "servers.count: GPU 2 is past CUDA_VISIBLE_DEVICES=6,7" in capsys.readouterr().err


def test_nvml_reports_the_jobs_gpus_under_the_jobs_indices():
    nvml = FakeNvml(count=8)            # the fake's UUIDs are GPU-<NVML index>
    snap = NvmlSource(nvml=nvml, visible=("5", "GPU-2")).sample()   # type: ignore[arg-type]
    assert [(g.index, g.uuid) for g in snap.gpus] == [(0, "GPU-5"), (1, "GPU-2")]
    assert snap.gpus[0].energy_j == (nvml.energy_mj + 5) / 1000.0
    # An entry no GPU matches is a row that says so, not a crash or another GPU's figures.
    snap = NvmlSource(nvml=nvml, visible=("GPU-x", "9")).sample()  # type: ignore[arg-type]
    assert [(g.index, g.uuid, g.power_w) for g in snap.gpus] == [(0, None, None), (1, None, None)]
    assert "'GPU-x' of CUDA_VISIBLE_DEVICES matches no GPU" in snap.gpus[0].errors[0]
    # No list: every GPU of the node, by NVML's numbers.
    assert len(NvmlSource(nvml=nvml, visible=None).sample().gpus) == 8  # type: ignore[arg-type]


def test_the_daemons_nvml_source_reads_the_list_from_its_environment(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    snap = NvmlSource(nvml=FakeNvml(count=4)).sample()             # type: ignore[arg-type]
    assert [(g.index, g.uuid) for g in snap.gpus] == [(0, "GPU-3")]


def test_real_servers_get_the_schedulers_devices(tmp_path: Path):
    """A real job's server processes (the simulator) launched under a scheduler's list: each
    one's environment, read back from /proc, holds its own entry of the list."""
    config = job_config(tmp_path, servers=2, prompts=20)
    seen: dict[str, str] = {}

    async def driver(job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: all(s.pid for s in fleet.servers.values()), "both servers' pids")
        for name, server in fleet.servers.items():
            environ = await anyio.Path(f"/proc/{server.pid}/environ").read_bytes()
            env = dict(item.split("=", 1) for item in environ.decode().split("\0") if "=" in item)
            seen[name] = env["CUDA_VISIBLE_DEVICES"]

    base = {**os.environ, "CUDA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb"}
    _, result = anyio.run(lambda: run_job(config, driver, base_env=base, timeout_s=90))
    assert result.finished
    assert seen == {"gpu0": "GPU-aaaa", "gpu1": "GPU-bbbb"}
