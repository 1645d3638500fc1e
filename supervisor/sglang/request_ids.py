"""The request id each streamed answer runs under (`rid`, what SGLang's /abort_request
names), made of what the state DB keeps for a prompt in flight."""

from __future__ import annotations

from state.records import ClaimedPrompt, InFlightClaim


def request_id(prompt: ClaimedPrompt | InFlightClaim) -> str:
    """The request id a streamed attempt runs under: the prompt id and the attempt number,
    so the server's log lines match ours, and the claim's stamp (microseconds, fixed width).
    SGLang aborts every request whose id *starts with* the one named
    (`sglang/srt/managers/scheduler.py:5675` abort_request), so no id may be a prefix of
    another: the fixed-length tail sees to that; the store gives every claim a distinct
    stamp, so a prompt claimed again never reuses an id. Made of what the state DB keeps
    for a prompt in flight (id, attempts, started_at), so a daemon that starts after one
    that died can name the requests it left on a server that outlived it
    (supervisor/servers/adoption.py) and abort them there."""
    return f"{prompt.id}#{prompt.attempts + 1}#{round(prompt.claimed_at * 1e6) & _TAIL_MASK:016x}"


_TAIL_MASK = (1 << 64) - 1
