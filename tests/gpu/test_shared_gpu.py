"""The one-GPU shims of the real-SGLang test, on the CPU: the launch wrapper execs the
server in place (same pid, so the daemon's process group and log are the server's) on the
shared device, and the daemon's GPU count is raised to the GPUs the test's config names."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.gpu.sglang_job import SHARED_GPU
from tests.gpu.shared_gpu import DEVICE_ENV, at_least


def _launch(env_extra: dict[str, str]) -> tuple[int, str]:
    code = "import os; print(os.getpid(), os.environ['CUDA_VISIBLE_DEVICES'])"
    env = {k: v for k, v in os.environ.items() if k != DEVICE_ENV}
    proc = subprocess.Popen([sys.executable, str(SHARED_GPU), "launch", "-c", code],
                            stdout=subprocess.PIPE, text=True, env={**env, **env_extra},
                            start_new_session=True)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    pid, device = out.split()
    assert int(pid) == proc.pid, "the wrapper must exec the server, not run it as a child"
    return proc.pid, device


def test_launch_puts_every_server_on_the_shared_device():
    assert _launch({"CUDA_VISIBLE_DEVICES": "1"})[1] == "0"
    assert _launch({"CUDA_VISIBLE_DEVICES": "1", DEVICE_ENV: "3"})[1] == "3"


def test_launch_without_a_command_says_how_to_use_it():
    out = subprocess.run([sys.executable, str(SHARED_GPU), "launch"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0 and "usage: shared_gpu.py launch" in out.stderr


def test_the_daemons_gpu_count_is_raised_to_the_named_gpus_only_where_there_is_a_driver():
    assert at_least(lambda nvml=None: 1, 2)() == 2
    assert at_least(lambda nvml=None: 8, 2)() == 8
    assert at_least(lambda nvml=None: None, 2)() is None
