"""The search moves one flag at a time, keeps a step only on KEPT, stops on budget."""

from __future__ import annotations

import pytest

from supervisor.contract.tuning import FlagRange, TrialVerdict
from supervisor.sglang.mamba_cap import MambaCap, mamba_cap
from supervisor.tune.search import (
    MAMBA,
    MEM,
    MRR,
    Search,
    ServerView,
    default_space,
    flags_change,
    parse_space,
)

V = TrialVerdict


def test_one_flag_at_a_time_kept_steps_move_on_a_rejected_one_ends_the_flag() -> None:
    space = (FlagRange(MRR, (16, 32, 64, 128)), FlagRange(MEM, (0.9, 0.92)))
    s = Search({MRR: 16, "model": "m"}, space, max_trials=10)
    c = s.next()
    assert c is not None and c.changed == f"{MRR} 16 -> 32" and c.flags[MRR] == 32
    s.report(c, V.KEPT)
    c = s.next()
    assert c is not None and c.flags == {MRR: 64, "model": "m"}
    s.report(c, V.REJECTED)                      # past 64 would not help either
    c = s.next()
    assert c is not None and c.flags == {MRR: 32, MEM: 0.9, "model": "m"}
    assert c.changed == f"{MEM} - -> 0.9"
    s.report(c, V.FAILED)
    assert s.next() is None and s.done
    assert s.best == {MRR: 32, "model": "m"} and s.gained() == {MRR: 32}
    assert s.trials == 3


def test_the_budget_ends_the_search_and_aborted_trials_do_not_count() -> None:
    s = Search({}, (FlagRange(MRR, (1, 2, 3, 4)),), max_trials=2)
    c = s.next()
    assert c is not None
    s.report(c, V.ABORTED)
    assert s.trials == 0 and s.trials_left == 2
    for _ in range(2):
        c = s.next()
        assert c is not None
        s.report(c, V.KEPT)
    assert s.next() is None and s.trials_left == 0


def test_a_verdict_for_a_candidate_not_asked_for_is_a_bug() -> None:
    s = Search({}, (FlagRange(MRR, (1,)),), max_trials=2)
    c = s.next()
    assert c is not None
    s.report(c, V.KEPT)
    with pytest.raises(AssertionError):
        s.report(c, V.KEPT)


def test_default_space_follows_what_sglang_chose() -> None:
    free = default_space({}, ServerView(effective_mrr=16, queue_reqs=0, token_usage=0.5))
    assert [r.name for r in free] == [MRR, MEM]
    assert free[0].values == (32, 48, 64) and free[1].values == (0.9, 0.92, 0.94)
    # Queueing and no Mamba cap: more running requests would only wait in SGLang's queue.
    queued = default_space({MEM: 0.93}, ServerView(effective_mrr=16, queue_reqs=3))
    assert [r.name for r in queued] == [MEM] and queued[0].values == (0.95,)
    # The seed's job: 16 running requests from a Mamba cache of 80 slots, 5 a request.
    lines = ["[2026-01-01] WARNING kv_cache_configurator.py:3140: max_running_requests is "
             "capped to 16 by the mamba state cache (max_mamba_cache_size=80, 5 state slots "
             "per request). To raise it: increase --mamba-full-memory-ratio or "
             "--max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16."]
    cap = mamba_cap(["an unrelated line", *lines])
    assert cap == MambaCap(running=16, cache_size=80, slots_per_request=5)
    capped = default_space({MRR: 64}, ServerView(effective_mrr=16, mamba=cap, queue_reqs=2))
    assert [r.name for r in capped][:2] == [MAMBA, MRR]
    assert capped[0].values == (320, 640) and capped[1].values == (64, 128)
    # No flag: a cache for twice the cap, or four times.
    bare = default_space({}, ServerView(effective_mrr=16, mamba=cap))
    assert bare[0].values == (160, 320) and bare[1].values == (32, 64)
    assert mamba_cap(["nothing here"]) is None


def test_flags_change_removes_what_the_wanted_set_lacks() -> None:
    assert flags_change({MRR: 16, MEM: 0.9}, {MRR: 32}) == {MRR: 32, MEM: None}
    assert flags_change({MRR: 16}, {MRR: 16}) == {}


def test_parse_space_names_the_bad_entry() -> None:
    assert parse_space({MRR: [32, 64]}) == (FlagRange(MRR, (32, 64)),)
    with pytest.raises(ValueError, match="without dashes"):
        parse_space({"--x": [1]})
    with pytest.raises(ValueError, match=f"{MRR}: expected a non-empty list"):
        parse_space({MRR: 5})  # type: ignore[dict-item]
