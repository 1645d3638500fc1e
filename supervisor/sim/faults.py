"""SGLang's ways of failing, reproduced so the supervisor's classification and restart code
runs against the real symptoms:

- crash: a Python traceback on stderr and exit status 1 (the tree is taken down first, as
  SGLang's launcher does when a subprocess dies);
- oom: SGLang's own out-of-memory lines on stderr, then SIGKILL of the whole process group —
  the launcher kills its tree, so the supervisor sees "killed by signal 9" after the lines;
- hang: the event loop blocks forever. The listening socket stays open, so the kernel still
  accepts connections and probes time out instead of being refused — the difference between
  a hung server and a dead one. SIGTERM is not acted on either (the handler never runs
  again), so the supervisor has to escalate to SIGKILL, as with a wedged NCCL call;
- stall: health stays 200 but no request ever completes (a scheduler stuck in a loop);
- empty outputs at a rate: content "" and reasoning_content null.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from subprocess import Popen

from .child_processes import kill_children, kill_own_group
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

    @property
    def is_stalled(self) -> bool:
        return self.fault == "stall"

    def apply(self, fault: str) -> None:
        """Switch to `fault` now. crash and oom never return; hang never returns to the loop."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {', '.join(FAULTS)}")
        self.fault = fault
        if fault == "crash":
            crash(self.children)
        elif fault == "oom":
            oom(self.children, during_load=self.loading)
        elif fault == "hang":
            hang()
        elif fault == "stall":
            log_err("Scheduler is stuck: no forward batch finished (simulated stall)", rank="TP0")
        # "none" lifts a stall: held requests then complete (a test can end one cleanly).


def _raise_crash() -> None:
    raise SimulatedCrash("Simulated scheduler crash: CUDA error: an illegal memory access "
                         "was encountered")


def crash(children: list[Popen]) -> None:
    try:
        _raise_crash()
    except SimulatedCrash:
        log_err("Scheduler hit an exception: " + traceback.format_exc().rstrip(), rank="TP0")
    log_err("Received sigquit from a child process. It usually means the child failed.")
    sys.stdout.flush()
    kill_children(children)
    os._exit(1)


_OOM_DECODE = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "sglang/srt/managers/scheduler.py", line 2801, in run_scheduler_process\n'
    "    scheduler.event_loop_overlap()\n"
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
    '  File "sglang/srt/managers/scheduler.py", line 2790, in run_scheduler_process\n'
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, "
    "dp_rank)\n"
    '  File "sglang/srt/model_executor/model_runner.py", line 1420, in init_memory_pool\n'
    "    raise RuntimeError(\n"
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
)


def oom(children: list[Popen], *, during_load: bool) -> None:
    if not during_load:
        log_err("Decode out of memory happened. #retracted_reqs: 12, #new_token_ratio: "
                "0.7000 -> 1.0000", rank="TP0")
    log_err(_OOM_LOAD if during_load else _OOM_DECODE, rank="TP0")
    log_err("Received sigquit from a child process. It usually means the child failed.")
    sys.stdout.flush()
    if os.getpgid(0) != os.getpid():
        kill_children(children)   # we cannot take the group down, so take the tree down
    kill_own_group()


def hang() -> None:
    log_err("NCCL watchdog: collective operation timeout (simulated hang)", rank="TP0")
    # Deliberately blocks the event loop's thread: nothing is served, accepted connections
    # are never read, timers never fire. time.sleep, not an Event, so a signal handler
    # that merely sets a flag cannot wake anything.
    while True:
        time.sleep(3600)
