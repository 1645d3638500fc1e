"""What each audit event is: the `kind` of an events-table row and of the contract's Event.

Named once here and used by those who write events (the daemon, the store's own
transactions), those who read them (dflash-tui, /metrics) and the SQL audit views. A client
keeps `Event.kind` as text: a newer daemon may write a kind this list does not have yet, and
an older client shows it as it is. Standard library only, like the rest of the contract.
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    # the job
    JOB_STARTED = "job_started"
    JOB_STOPPED = "job_stopped"
    RECOVERED_IN_FLIGHT = "recovered_in_flight"  # in flight at the last stop: pending again
    CONFIG_RELOAD = "config_reload"              # SIGHUP: applied or refused
    STATE_RESTORED = "state_restored"            # the DB came from a backup
    STATE_REBUILT = "state_rebuilt"              # the DB rebuilt from the output's shards
    # generation and dispatch
    MAX_TOKENS = "max_tokens"
    REQUEUE_TRUNCATED = "requeue_truncated"
    CONTINUE_TRUNCATED = "continue_truncated"
    REQUEUE_FAILED = "requeue_failed"
    REIMPORT_CHANGED = "reimport_changed"        # prompts whose text changed, imported again
    PAUSED = "paused"                            # subject: the pause's source
    RESUMED = "resumed"
    REQUEST_STALLED = "request_stalled"          # no token for dispatch.stall_s: aborted, retried
    LOOP_ABORTED = "loop_aborted"                # a loop stopped while it ran, tokens saved
    # servers
    SERVER_STATE = "server_state"                # detail: from, to, reason, exit_kind
    SERVER_RETUNE = "server_retune"
    SERVER_OVERCOMMIT = "server_overcommit"      # SGLang queues or retracts what we send
    INFLIGHT_LIMIT = "inflight_limit"            # the saturation guard moved a server's limit
    ORPHAN_STOPPED = "orphan_stopped"            # a server an earlier daemon left running
    SERVER_ADOPTED = "server_adopted"            # one it left running, proven ours: serving on
    ADOPTION_REFUSED = "adoption_refused"        # a recorded pid not proven ours: left alone
    # the tuner (supervisor/tune/): subject the canary (or the server promoted to)
    TUNE_STARTED = "tune_started"                # detail: canary, space, max_trials, worth
    TUNE_TRIAL = "tune_trial"                    # a trial's start and its end (the row's figures)
    TUNE_PROMOTED = "tune_promoted"              # the winner's flags now run on this server
    TUNE_STOPPED = "tune_stopped"                # done, not worth it, stopped: why, best flags
    # shards and uploads
    SHARD_MISMATCH = "shard_mismatch"            # a shard file not what the DB says: rewrite
    UPLOAD_CORRUPT = "upload_corrupt"
    UPLOADS_FAILING = "uploads_failing"
    UPLOADS_RECOVERED = "uploads_recovered"
    UPLOADS_STOPPED = "uploads_stopped"
    # the control socket's audit row: who asked for what, and the answer
    CONTROL_ACTION = "control_action"
