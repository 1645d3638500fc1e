"""Every key of the `settings` table, named once: what the daemon keeps across restarts and
which module writes it. A key not listed here is not a setting (settings_table takes these)."""

from __future__ import annotations

from enum import StrEnum


class Setting(StrEnum):
    MAX_TOKENS = "max_tokens"                # the live limit (dispatch; `ctl max-tokens`)
    OPERATOR_PAUSE = "operator_pause"        # an operator's pause reason; "" when none
    IMPORTED_PROMPTS = "imported_prompts"    # fingerprint of the imported prompt file
    ENERGY_JOULES = "energy_joules"          # the job's energy so far (job/energy_ledger.py)
    OUTPUT_LOCATION = "output_location"      # where the shards go (verify and rebuild read it)
    JOB_PARTITION = "job_partition"          # "I/N", or "" for a single-node job
    PROMPTS_SHA256 = "prompts_sha256"        # SHA-256 of the prompt file's bytes
    # A random token made once per job, in every server's environment (DFLASH_JOB_TOKEN):
    # part of the proof a later daemon asks before it adopts a running server
    # (supervisor/servers/adoption.py).
    JOB_TOKEN = "job_token"
