"""SGLang's ways of failing, reproduced so the supervisor's classification and restart code
runs against the real symptoms:

- crash: "Scheduler hit an exception: <traceback>", then the launcher's SIGQUIT line, then
  its whole tree killed by SIGKILL, itself last: the supervisor sees "killed by signal 9"
  after a crash, never an exit status (SGLang 0.5.23 dies this way for any scheduler error);
- oom: the same path with SGLang's out-of-memory error in the traceback (torch's "CUDA out
  of memory" in decode; "Not enough memory. Please try to increase --mem-fraction-static"
  while loading);
- retract: KV-pool pressure (retraction.py): warning lines and counters, no failure;
- hang: the event loop blocks forever. The listening socket stays open, so the kernel still
  accepts connections and probes time out instead of being refused — the difference between
  a hung server and a dead one. SIGTERM is not acted on either (the handler never runs
  again), so the supervisor has to escalate to SIGKILL, as with a wedged NCCL call;
- stall: the scheduler is stuck (in a loop, a wedged collective): no decode step runs, so
  every stream stops where it is and no request is admitted; /health and /health_generate
  still answer at first and fail (503) after 20 s without output (http_api.py);
- stall share: a share of the prompts (a stable subset) get stuck halfway through their
  first request, the server otherwise fine: the request sends no more tokens until it is
  aborted; retried, it completes (a stuck request, not a stuck server);
- collapse: the server stays up and answers, but decodes at 1/collapse_factor of its speed
  (a GPU thrashing its KV cache, throttled, or starved by its peers): sglang:gen_throughput
  and the tokens the clients see fall together (decode_meter.py); `none` restores the speed;
- error share: a share of the prompts (a stable subset) have their first request aborted
  halfway by the scheduler with an error status, as SGLang aborts the last request of a
  decode batch still out of memory after retracting all the others
  (`sglang/srt/managers/schedule_batch.py` retract_decode, HTTPStatus.INTERNAL_SERVER_ERROR).
  Streamed, the tokens so far have gone out and the stream carries SGLang's error chunk
  (chat_stream.py); unstreamed, the answer is a 500. Retried, it completes;
- empty outputs at a rate: content "" and reasoning_content null.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from subprocess import Popen

from .child_processes import kill_children
from .options import FAULTS
from .sim_log import log_err


class SimulatedCrash(RuntimeError):
    pass


@dataclass
class FaultState:
    fault: str = "none"
    empty_rate: float = 0.0
    children: list[Popen] = field(default_factory=list)
    loading: bool = True       # OOM during load says something different from OOM in decode
    stall_share: float = 0.0
    error_share: float = 0.0
    collapse_factor: float = 8.0
    # Told the decode speed when a collapse starts (1 / collapse_factor) or ends (1).
    on_speed: Callable[[float], None] | None = None
    _stalled: set[bytes] = field(default_factory=set)
    _errored: set[bytes] = field(default_factory=set)

    def stalls(self, digest: bytes) -> bool:
        """Whether this request of the prompt gets stuck: prompts in the stall share, on
        their first request only."""
        return _first_in_share(digest, self.stall_share, b"stall", self._stalled)

    def errors(self, digest: bytes) -> bool:
        """Whether this request of the prompt is aborted halfway with an error status:
        prompts in the error share, on their first request only."""
        return _first_in_share(digest, self.error_share, b"error", self._errored)

    @property
    def is_stalled(self) -> bool:
        return self.fault == "stall"

    def apply(self, fault: str) -> None:
        """Switch to `fault` now. crash and oom never return; hang never returns to the loop."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {', '.join(FAULTS)}")
        self.fault = fault
        if self.on_speed is not None:
            # A stuck scheduler runs no decode step: every stream stops where it is.
            self.on_speed(0.0 if fault == "stall" else
                          1.0 / self.collapse_factor if fault == "collapse" else 1.0)
        if fault == "crash":
            crash(self.children, during_load=self.loading)
        elif fault == "oom":
            oom(self.children, during_load=self.loading)
        elif fault == "hang":
            hang()
        elif fault == "stall":
            log_err("Scheduler is stuck: no forward batch finished (simulated stall)", rank="TP0")
        elif fault == "collapse":
            log_err(f"Decode slowed to 1/{self.collapse_factor:g} of its speed (simulated "
                    "throughput collapse)", rank="TP0")
        # "none" lifts a stall: held requests then complete (a test can end one cleanly).


def _first_in_share(digest: bytes, share: float, salt: bytes, seen: set[bytes]) -> bool:
    """A stable share of the prompts (by digest), the first time each is asked."""
    if share <= 0 or digest in seen:
        return False
    draw = int.from_bytes(hashlib.blake2b(digest + salt, digest_size=8).digest(), "big")
    if (draw + 0.5) / 2.0 ** 64 >= share:
        return False
    seen.add(digest)
    return True


def _raise_crash() -> None:
    raise SimulatedCrash("Simulated scheduler crash: CUDA error: an illegal memory access "
                         "was encountered")


def _sigquit_and_kill_tree(children: list[Popen], *, during_load: bool) -> None:
    """The scheduler has sent SIGQUIT to the launcher, whose handler logs one line and kills
    the process tree, itself last, by SIGKILL (`sglang/srt/entrypoints/engine.py`
    launch_phase_sigquit_handler while loading; `sglang/srt/managers/tokenizer_manager.py`
    running_phase_sigquit_handler once serving, installed with loop.add_signal_handler, so
    signum and frame are None; `sglang/srt/utils/common.py` kill_process_tree)."""
    if during_load:
        log_err("Received sigquit from a child process. It usually means the child failed.")
    else:
        log_err("SIGQUIT received. signum=None, frame=None. It usually means one child "
                "failed.")
    pid = os.getpid()
    log_err(f"kill_process_tree called: parent_pid={pid}, include_parent=True, pid={pid}")
    sys.stdout.flush()
    kill_children(children)
    os.kill(pid, signal.SIGKILL)


def crash(children: list[Popen], *, during_load: bool = False) -> None:
    """`sglang/srt/managers/scheduler.py` run_scheduler_process: an exception in the
    scheduler is logged as "Scheduler hit an exception: <traceback>", then SIGQUIT to the
    launcher; the server ends killed by signal 9, not with an exit status."""
    try:
        _raise_crash()
    except SimulatedCrash:
        log_err("Scheduler hit an exception: " + traceback.format_exc().rstrip(), rank="TP0")
    _sigquit_and_kill_tree(children, during_load=during_load)


_OOM_DECODE = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "sglang/srt/managers/scheduler.py", line 6367, in run_scheduler_process\n'
    "    scheduler.run_event_loop()\n"
    '  File "sglang/srt/managers/scheduler.py", line 1003, in event_loop_overlap\n'
    "    batch_result = self.run_batch(batch)\n"
    '  File "sglang/srt/model_executor/model_runner.py", line 1912, in forward_decode\n'
    "    return self.model.forward(\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 139.81 GiB of which 1.19 GiB is free. Including non-PyTorch memory, "
    "this process has 138.61 GiB memory in use. Of the allocated memory 131.42 GiB is "
    "allocated by PyTorch, and 4.87 GiB is reserved by PyTorch but unallocated. If reserved "
    "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments"
    ":True to avoid fragmentation."
)
_OOM_LOAD = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process\n'
    "    scheduler = Scheduler(server_args, port_args)\n"
    '  File "sglang/srt/model_executor/model_runner.py", line 1420, in init_memory_pool\n'
    "    raise RuntimeError(\n"
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
)


# Past the memory fraction's cliff (flag_response.py): the KV pool is allocated, then the
# CUDA graphs' capture runs out of what is left (model_runner.py init_device_graphs).
OOM_GRAPHS = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process\n'
    "    scheduler = Scheduler(server_args, port_args)\n"
    '  File "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", line 602, in '
    "__init__\n"
    '    raise Exception(\n'
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB. "
    "GPU 0 has a total capacity of 139.81 GiB of which 612.00 MiB is free.\n"
    # runner_backend_utils/__init__.py:14 CUDA_GRAPH_CAPTURE_FAILED_MSG
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
    "(Not recommended. Huge performance loss)"
)


def oom(children: list[Popen], *, during_load: bool, text: str | None = None) -> None:
    """CUDA out of memory in the scheduler: the same path as a crash (SIGQUIT, tree killed,
    signal 9), with the out-of-memory error in the traceback (`text`: another one)."""
    log_err(text or (_OOM_LOAD if during_load else _OOM_DECODE), rank="TP0")
    _sigquit_and_kill_tree(children, during_load=during_load)


def hang() -> None:
    log_err("NCCL watchdog: collective operation timeout (simulated hang)", rank="TP0")
    # A wedged process does not act on SIGTERM; only SIGKILL ends it.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    # Deliberately blocks the event loop's thread: nothing is served, accepted connections
    # are never read, timers never fire. time.sleep, not an Event, so a signal handler
    # that merely sets a flag cannot wake anything.
    while True:
        time.sleep(3600)
