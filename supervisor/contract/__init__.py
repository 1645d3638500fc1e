"""The status contract: everything the control socket serves and every client reads.

Standard library only and importing nothing of the daemon, so the daemon, `status`/`ctl`
and dflash-tui share it: `status` (the snapshot, its events and the event stream), `actions`
(each action's request and answer), `codec` (JSON <-> records). Imports nothing here.

Paths on the socket (all JSON; errors are `ErrorBody` with a 4xx status):
    GET  /v1/status                       -> Status
    GET  /v1/events[?since=ID]            -> NDJSON lines: StreamItem (see status.py)
    GET  /v1/servers/{name}/log?lines=N   -> LogTail
    POST /v1/max-tokens                   MaxTokensRequest      -> MaxTokensResult
    POST /v1/requeue-truncated            RequeueTruncatedRequest -> RequeueResult
    POST /v1/requeue-failed               RequeueFailedRequest  -> RequeueResult
    POST /v1/pause                        PauseRequest          -> PauseResult
    POST /v1/resume                       {}                    -> ResumeResult
    POST /v1/restart                      RestartRequest        -> RestartResult
    POST /v1/retune                       RetuneRequest         -> RetuneResult
    POST /v1/servers/{name}/reset         {}                    -> ResetResult
    GET  /metrics                         Prometheus text (not part of this contract)
"""
