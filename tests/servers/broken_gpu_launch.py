"""A launch command for tests: the simulated server, except on a "broken GPU", where it
fails while loading every time it is started.

    python broken_gpu_launch.py <SGLang flags...>

CUDA_VISIBLE_DEVICES (set by the supervisor for each server) is compared with the
SIM_BROKEN_GPUS environment variable; on a match `--sim-fault $SIM_BROKEN_FAULT` (default
crash) is added. exec keeps the pid, so the supervisor's process group is the server's.
"""

import os
import sys


def main() -> None:
    argv = [sys.executable, "-m", "supervisor.sim", *sys.argv[1:]]
    broken = os.environ.get("SIM_BROKEN_GPUS", "").split(";")
    if os.environ.get("CUDA_VISIBLE_DEVICES") in broken:
        argv += ["--sim-fault", os.environ.get("SIM_BROKEN_FAULT", "crash")]
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    main()
