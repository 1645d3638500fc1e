"""The GPUs a scheduler gave this daemon: its own CUDA_VISIBLE_DEVICES.

Slurm (`--gres=gpu:N`), Kubernetes' device plugin and most batch systems hand a job its GPUs
by setting CUDA_VISIBLE_DEVICES for it ("2,3", or "GPU-<uuid>,..."); the physical GPUs 0 and
1 may be another job's. Where the daemon was started with the variable set, a server's
`servers.gpus` (or `count`) are indices into that list, as CUDA's own device numbers inside
the job are: GPU 0 is the list's first entry. A server's CUDA_VISIBLE_DEVICES is then built
from the list's entries, never the bare index, and NVML telemetry (which always numbers the
whole node) reports the same devices under the same indices. Without the variable, the
config's numbers are the node's GPUs, as before.

Entries are kept as written: ordinals, full or shortened `GPU-` UUIDs, `MIG-` ids.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

VAR = "CUDA_VISIBLE_DEVICES"


def visible_devices(env: Mapping[str, str] | None = None) -> tuple[str, ...] | None:
    """The daemon's CUDA_VISIBLE_DEVICES entries; None when the variable is not set (every
    GPU of the node is the job's to name), () when it is set empty (CUDA then sees none)."""
    value = (os.environ if env is None else env).get(VAR)
    if value is None:
        return None
    return tuple(entry.strip() for entry in value.split(",") if entry.strip())


def devices_for(gpus: Sequence[int], visible: Sequence[str] | None) -> tuple[str, ...]:
    """The CUDA_VISIBLE_DEVICES entries for a server that owns `gpus` (the config's numbers).
    IndexError for an index past `visible` (the start refuses such a config first)."""
    if visible is None:
        return tuple(str(g) for g in gpus)
    out = []
    for g in gpus:
        if not 0 <= g < len(visible):
            raise IndexError(f"GPU index {g} is past {VAR}={','.join(visible)}")
        out.append(visible[g])
    return tuple(out)


def describe(visible: Sequence[str]) -> str:
    """How a refusal names the list: `CUDA_VISIBLE_DEVICES=2,3 (2 GPUs: indices 0..1)`."""
    n = len(visible)
    if n == 0:
        return f"{VAR} is set empty (this daemon was given no GPU)"
    indices = "index 0" if n == 1 else f"indices 0..{n - 1}"
    return f"{VAR}={','.join(visible)} ({n} GPU{'s' if n != 1 else ''}: {indices})"
