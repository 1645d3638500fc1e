"""Why generated tokens were thrown away: the causes of the waste ledger (state/waste_table.py).

Named once here, like the event kinds, and used by the store (its `waste` table's CHECK and
the `token_ledger` rows), the dispatcher (which records them), /metrics (the `cause` label)
and the clients. Standard library only, like the rest of the contract.
"""

from __future__ import annotations

from enum import StrEnum


class WasteCause(StrEnum):
    CRASH = "crash"        # the server died under the request (its partial output is lost)
    STOP = "stop"          # a graceful stop cut the request off (daemon stop, drain timeout)
    LOOP = "loop"          # a degenerate loop: aborted while decoding, or recorded looping
    STALL = "stall"        # no token for dispatch.stall_s: aborted and requeued
    RETRY = "retry"        # an answer the server ended unusable (an abort) and we retried
    REQUEUE = "requeue"    # an operator sent a recorded answer back (requeue truncated, re-import)
    PROBE = "probe"        # the tuner's long-batch check: a full batch decoded to the limit, dropped
