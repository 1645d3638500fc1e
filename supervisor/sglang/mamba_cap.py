"""SGLang's warning when its Mamba state cache caps the running requests.

SGLang 0.5.23 sizes max running requests from the KV pool (or the flag), then caps it by
`max_mamba_cache_size // slots-per-request` for a hybrid Mamba model, and says so once at
load (`sglang/srt/mem_cache/kv_cache_configurator.py` ~3140):
"max_running_requests is capped to %d by the mamba state cache (max_mamba_cache_size=%d,
%d state slots per request). ..." - the cap the seed's job ran into (16 requests from 80 slots).
The tuner reads it from the server's log to know that raising --max-mamba-cache-size, not
--max-running-requests alone, is the step that lifts the cap.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_CAPPED = re.compile(r"max_running_requests is capped to (\d+) by the mamba state cache "
                     r"\(max_mamba_cache_size=(\d+), (\d+) state slots per request\)")


@dataclass(frozen=True)
class MambaCap:
    running: int          # the cap on running requests
    cache_size: int       # max_mamba_cache_size SGLang ran with
    slots_per_request: int

    def cache_for(self, running: int) -> int:
        """The --max-mamba-cache-size that lets `running` requests run."""
        return running * self.slots_per_request


def mamba_cap(lines: Iterable[str]) -> MambaCap | None:
    """The last cap warning in the log lines (the newest life's), or None."""
    found = None
    for line in lines:
        m = _CAPPED.search(line)
        if m:
            found = MambaCap(int(m[1]), int(m[2]), int(m[3]))
    return found
