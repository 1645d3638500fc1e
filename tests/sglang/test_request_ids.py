"""The request ids streamed answers run under (supervisor/sglang/request_ids.py)."""

from __future__ import annotations

from state.records import ClaimedPrompt, InFlightClaim
from supervisor.sglang.request_ids import request_id


def test_request_ids_name_prompt_and_attempt_and_none_prefixes_another() -> None:
    # SGLang aborts every request whose rid starts with the one named
    # (`sglang/srt/managers/scheduler.py` abort_request): ids must be prefix-free.
    # The tail is the claim's stamp (distinct for every claim, state/prompts_table.py), of
    # any size from a test clock's 0 to a wall clock's.
    stamps = (0.0, 1e-6, 1.5, 1765000000.123456, 1765000000.123457)
    ids = [request_id(ClaimedPrompt(pid, [], attempts, stamp))
           for pid in ("p1", "p1#2", "p10", "p1#2#") for attempts in (0, 1, 9)
           for stamp in stamps]
    assert len(set(ids)) == len(ids)
    assert not any(a != b and b.startswith(a) for a in ids for b in ids)
    assert request_id(ClaimedPrompt("p7", [], 2)).startswith("p7#3#")
    # What a later daemon rebuilds from the DB row names the very same request.
    claimed = ClaimedPrompt("p7", [], 2, 1765000000.123456)
    assert request_id(InFlightClaim("p7", 2, "gpu0", 1765000000.123456)) == request_id(claimed)
