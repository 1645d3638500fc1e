"""The length-aware ETA, the loop split and the energy figures of a real job (simulated
servers, fake GPUs with an energy counter) in the status, the progress line, the status
contract and /metrics."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.contract import status as c
from supervisor.control.metrics import RestartCauses, render
from supervisor.job.contract_status import build_status
from supervisor.job.progress_line import progress_line
from supervisor.job.status import JobStatus
from tests.fixtures.real_job import job_config, run_job
from tests.fixtures.state_db import read_db

pytestmark = pytest.mark.slow


async def test_eta_loops_and_energy_reach_every_reader(tmp_path):
    cfg = job_config(tmp_path, servers=2, prompts=400,
                     flags={"sim-loop-share": "0.5", "sim-time-scale": 200})
    cfg = replace(cfg, generation=replace(cfg.generation, max_tokens=4096))
    seen: list[JobStatus] = []
    job, result = await run_job(cfg, on_status=seen.append, timeout_s=90)
    assert result.status.finished

    with_eta = [s for s in seen if s.length_eta is not None and s.length_eta.eta_s is not None
                and s.remaining]
    assert with_eta, "the length-aware ETA never had an estimate"
    mid = with_eta[len(with_eta) // 2]
    e = mid.length_eta
    assert e.low_s <= e.eta_s <= e.high_s and mid.eta_s == e.eta_s
    assert e.expected_tokens > 0 and e.decode_tok_per_s > 0

    final = seen[-1]
    [(loops,)] = read_db(tmp_path / "job.db", "SELECT count(*) FROM prompts WHERE loop = 1")
    assert loops > 0 and final.dispatch.quality.loop_total == loops
    energy = final.energy
    assert energy.available and energy.kwh > 0
    assert {g.source for g in energy.gpus} == {"counter"}
    with_rate = [s for s in seen if s.energy is not None and s.energy.joules_per_token]
    assert with_rate and with_rate[-1].energy.servers[0].tokens_per_joule > 0
    [(saved,)] = read_db(tmp_path / "job.db",
                         "SELECT value FROM settings WHERE key = 'energy_joules'")
    assert float(saved) == pytest.approx(energy.kwh * 3.6e6)

    line = progress_line(mid)
    assert "kWh" in line and "[" in line             # energy and the ETA's interval

    status = build_status(mid, cfg, started_at=0.0, histogram=((0, 4097), (1,), 1))
    assert c.Status.from_json(status.to_json()) == status
    assert status.eta.basis.startswith("output tokens") and status.eta.interval == 0.8
    assert status.eta.low_s == e.low_s and status.eta.windowed_s == mid.windowed_eta_s
    assert status.energy is not None and status.energy.source == "counter"
    assert all(g.energy_j is not None for g in status.gpus.gpus)
    assert status.quality.loop_rate == mid.dispatch.quality.loop_rate

    text = render(status, (final.done, final.failed), RestartCauses(), {}).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("dflash_eta_low_seconds", "dflash_eta_high_seconds", "dflash_energy_used_joules",
                 "dflash_energy_joules_per_token", "dflash_truncation_loop_ratio",
                 "dflash_gpu_energy_joules", "dflash_server_tokens_per_joule"):
        assert name in families, sorted(families)
    [used] = families["dflash_energy_used_joules"].samples
    assert used.value == pytest.approx(status.energy.kwh_so_far * 3.6e6)
