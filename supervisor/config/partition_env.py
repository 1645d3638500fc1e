"""`job.partition = "auto"`: this node's index and the node count, from the scheduler.

The engine that starts the nodes already numbers them; taking its numbers (instead of a
hand-written `I/N` per node) means a requeued or replaced node picks up the same part.
- Slurm job array (`sbatch --array=0-7`): `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_COUNT`,
  `SLURM_ARRAY_TASK_MIN` (and `SLURM_ARRAY_TASK_STEP` for `--array=0-14:2`); the index is
  the task's position in the array, so `--array=1-8` works as well as `0-7`.
- Kubernetes Indexed Job: `JOB_COMPLETION_INDEX` (set by the Job controller in every pod);
  Kubernetes puts no count in the environment, so it comes from `job.partition_count` or
  `DFLASH_PARTITION_COUNT` (the manifest sets it to `spec.completions`).
Anything else is refused with one line saying what was looked for: guessing "0/1" would make
every node generate the whole prompt file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

COUNT_ENV = "DFLASH_PARTITION_COUNT"


class PartitionEnvError(ValueError):
    """The environment does not say which part this node runs."""


@dataclass(frozen=True)
class ResolvedPartition:
    index: int
    count: int
    source: str      # "slurm array task 3 of 0-7", for the log


def _int(env: Mapping[str, str], name: str) -> int:
    raw = env.get(name, "")
    try:
        return int(raw)
    except ValueError:
        raise PartitionEnvError(f"{name}={raw!r} is not an integer") from None


def from_slurm(env: Mapping[str, str]) -> ResolvedPartition:
    task = _int(env, "SLURM_ARRAY_TASK_ID")
    if "SLURM_ARRAY_TASK_COUNT" not in env or "SLURM_ARRAY_TASK_MIN" not in env:
        raise PartitionEnvError(
            "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT / SLURM_ARRAY_TASK_MIN are "
            "not (a Slurm older than 17.02?); set job.partition = \"I/N\" instead")
    count = _int(env, "SLURM_ARRAY_TASK_COUNT")
    low = _int(env, "SLURM_ARRAY_TASK_MIN")
    step = _int(env, "SLURM_ARRAY_TASK_STEP") if env.get("SLURM_ARRAY_TASK_STEP") else 1
    if count < 1 or step < 1:
        raise PartitionEnvError(f"SLURM_ARRAY_TASK_COUNT={count}, SLURM_ARRAY_TASK_STEP={step}: "
                                "need both >= 1")
    offset = task - low
    if offset < 0 or offset % step or offset // step >= count:
        # --array=1,5,9 or 0-9%2 with gaps: positions are not task ids minus the minimum.
        raise PartitionEnvError(
            f"Slurm array task {task} is not position < {count} of a contiguous array starting "
            f"at {low} with step {step}; submit a range such as --array=0-{count - 1}")
    high = low + (count - 1) * step
    return ResolvedPartition(offset // step, count,
                             f"slurm array task {task} of {low}-{high}")


def from_kubernetes(env: Mapping[str, str], configured_count: int) -> ResolvedPartition:
    index = _int(env, "JOB_COMPLETION_INDEX")
    if configured_count:
        count, where = configured_count, "job.partition_count"
    elif env.get(COUNT_ENV):
        count, where = _int(env, COUNT_ENV), COUNT_ENV
    else:
        raise PartitionEnvError(
            f"JOB_COMPLETION_INDEX={index} but no node count: set job.partition_count or "
            f"{COUNT_ENV} to the Job's spec.completions")
    if count < 1 or not 0 <= index < count:
        raise PartitionEnvError(f"JOB_COMPLETION_INDEX={index} is not within 0..{count - 1} "
                                f"({where}={count})")
    return ResolvedPartition(index, count, f"kubernetes completion index {index} of {count}")


def resolve(env: Mapping[str, str], configured_count: int = 0) -> ResolvedPartition:
    """The partition the scheduler gave this node, or PartitionEnvError."""
    if env.get("SLURM_ARRAY_TASK_ID"):
        return from_slurm(env)
    if env.get("JOB_COMPLETION_INDEX"):
        return from_kubernetes(env, configured_count)
    if env.get("SLURM_JOB_ID"):
        raise PartitionEnvError(
            "a Slurm job but not an array job (no SLURM_ARRAY_TASK_ID): submit with "
            "sbatch --array=0-N-1, or set job.partition = \"I/N\"")
    raise PartitionEnvError(
        "neither a Slurm array job (SLURM_ARRAY_TASK_ID) nor a Kubernetes Indexed Job "
        "(JOB_COMPLETION_INDEX) is in the environment; set job.partition = \"I/N\" to run "
        "a part by hand")
