"""Two supervised servers on one GPU, for the real-SGLang test on a one-GPU machine.

The daemon gives each server its own GPU (`servers.gpus` may not list a GPU twice) and
refuses GPU indices NVML does not report, which is right for a production node. The test
still wants two real servers, so it runs them both on one device:

    python tests/gpu/shared_gpu.py launch -m sglang.launch_server ARGS...
        the servers' launch command: CUDA_VISIBLE_DEVICES is replaced by $DFLASH_GPU_TEST_DEVICE
        (default 0), then the rest of the command is exec'd, so the pid, the process group
        and the log the daemon watches are SGLang's own;
    python -m tests.gpu.shared_gpu daemon run --config job.toml
        `dflash-supervisor` itself, except that the node is said to have at least as many
        GPUs as the config names (and the daemon is given no CUDA_VISIBLE_DEVICES list); NVML
        telemetry still reads the real devices.

Nothing else of the daemon is changed: it spawns, watches, kills and restarts real SGLang.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

DEVICE_ENV = "DFLASH_GPU_TEST_DEVICE"
# The daemon shim's GPU count: the test's config names GPUs 0 and 1.
NAMED_GPUS = 2


def launch(argv: list[str]) -> None:
    """Exec `python ARGV` with every server on the one shared device."""
    if not argv:
        sys.exit("usage: shared_gpu.py launch -m MODULE [ARGS...]")
    os.environ["CUDA_VISIBLE_DEVICES"] = os.environ.get(DEVICE_ENV, "0")
    os.execv(sys.executable, [sys.executable, *argv])


def at_least(count_gpus: Callable[..., int | None], named: int) -> Callable[..., int | None]:
    """`count_gpus` raised to `named`; None (no driver) stays None."""
    def count(nvml=None):  # type: ignore[no-untyped-def]
        real = count_gpus(nvml)
        return None if real is None else max(real, named)
    return count


def daemon(argv: list[str]) -> int:
    import supervisor.gpu.nvml_source as nvml_source
    from supervisor.commands.cli import main

    nvml_source.node_gpu_count = at_least(nvml_source.node_gpu_count, NAMED_GPUS)
    # A machine that hands this shell one GPU by CUDA_VISIBLE_DEVICES would make the config's
    # GPUs 0 and 1 indices into a one-entry list (refused); the launch wrapper above puts
    # every server on the shared device anyway.
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    return main(argv)


if __name__ == "__main__":
    mode, rest = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if mode == "launch":
        launch(rest)
    elif mode == "daemon":
        sys.exit(daemon(rest))
    else:
        sys.exit("usage: shared_gpu.py launch -m MODULE ARGS... | daemon run --config PATH")
