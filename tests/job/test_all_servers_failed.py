"""With every server FAILED the job keeps running and says so (a WARNING repeated while it
lasts, and the STATUS= line), and an operator's reset brings it back to finish the job."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import anyio
import pytest

from supervisor.gpu.fake_source import FakeGpuSource
from supervisor.job.main_loop import Job, JobResult
from supervisor.job.progress_line import progress_line
from tests.fixtures.real_job import fast_fleet, job_config, wait_for

pytestmark = pytest.mark.slow

LAUNCH = Path(__file__).parents[1] / "fixtures" / "gated_launch.py"


def test_every_server_failed_warns_repeatedly_and_a_reset_recovers(tmp_path: Path, caplog):
    gate = tmp_path / "gate"
    gate.write_text("servers cannot start while this exists")
    config = job_config(tmp_path / "job", servers=2, prompts=40,
                        command=[sys.executable, str(LAUNCH)], max_failures=1)
    lines: list[str] = []
    job = Job(config, fleet_options=fast_fleet({**os.environ, "GATE_FILE": str(gate)}),
              status_interval_s=0.05, on_status=lambda s: lines.append(progress_line(s)),
              gpu_source=FakeGpuSource(count=2), handle_signals=False)
    job.all_failed_warn_s = 0.3
    result: JobResult | None = None
    caplog.set_level(logging.WARNING, logger="supervisor.job")

    def warnings() -> int:
        return sum("every server FAILED" in r.getMessage() for r in caplog.records)

    async def main() -> None:
        nonlocal result

        async def operator() -> None:
            await wait_for(lambda: job.fleet is not None, "the fleet")
            await wait_for(lambda: warnings() >= 3, "three warnings", timeout_s=30)
            assert result is None                      # still running, waiting for someone
            assert any("EVERY SERVER FAILED" in line for line in lines)
            gate.unlink()
            for name in list(job.fleet.servers):
                assert await job.fleet.reset(name, "test")

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                tg.start_soon(operator)
                result = await job.run()

    anyio.run(main)
    assert result is not None and result.finished, result
    assert result.status.done == 40
    text = [r.getMessage() for r in caplog.records if "every server FAILED" in r.getMessage()]
    assert "dflash-supervisor ctl reset NAME" in text[0]
    assert any("servers are back" in r.getMessage() for r in caplog.records)
