"""The status contract: everything the control socket serves and every client reads.

Standard library only and importing nothing of the daemon, so the daemon, `status`/`ctl`
and dflash-tui share it: `status` (the snapshot, its events and the event stream), `actions`
(each call's request and answer records), `api` (the table of calls: method, versioned
path, request, result, errors; the daemon's routes and the client derive from it),
`codec` (JSON <-> records). Imports nothing here.

Paths on the socket besides the table's (errors are `ErrorBody` with a 4xx status):
    GET  /v1/events[?since=ID]            -> NDJSON lines: StreamItem (see status.py)
    GET  /metrics                         Prometheus text (not part of this contract)
"""
