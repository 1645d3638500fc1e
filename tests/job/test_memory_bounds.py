"""Nothing the daemon keeps grows with the answers: after a real job of N answers, every list,
dict, set and deque reachable from the Job holds fewer than N/2 items unless it is a deque
with a bound, and the per-request maps are empty. Counted, not timed: a structure that keeps
one item per answer (a list of latencies, a dict of finished ids) holds N of them here and
fails this test, where over a 900K-answer job it would be the daemon's memory growing
(benchmarks/README.md, "Seed scale"; benchmarks/probe_daemon_memory.py finds such sites)."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.real_job import job_config, run_job

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ANSWERS = 2_400
CONTAINERS = (list, dict, set, frozenset, deque)
OURS = ("supervisor.", "state.")


def _ours(obj: object) -> bool:
    return type(obj).__module__.startswith(OURS) and hasattr(obj, "__dict__")


def walk(root: object, max_depth: int = 8) -> tuple[dict[str, Any], set[str]]:
    """Every container reachable from `root` through our objects' attributes and the
    containers' own items (the first 64 of each, to stay cheap), by path; and the names of
    our classes the walk went through. Breadth first: each object is reached by its shortest
    path, so the depth bound never hides one that a long path happened to reach first."""
    seen: set[int] = set()
    found: dict[str, Any] = {}
    classes: set[str] = set()
    stack: deque[tuple[str, object, int]] = deque([("job", root, 0)])
    while stack:
        path, obj, depth = stack.popleft()
        if id(obj) in seen or depth > max_depth:
            continue
        seen.add(id(obj))
        if isinstance(obj, CONTAINERS):
            found[path] = obj
            items = list(obj.values() if isinstance(obj, dict) else obj)[:64]
            stack += [(f"{path}[]", v, depth + 1) for v in items
                      if isinstance(v, CONTAINERS) or _ours(v)]
        elif _ours(obj):
            classes.add(type(obj).__name__)
            for name, value in vars(obj).items():
                if isinstance(value, CONTAINERS) or _ours(value):
                    stack.append((f"{path}.{name}", value, depth + 1))
    return found, classes


async def test_no_structure_keeps_an_item_per_answer(tmp_path: Path):
    config = job_config(tmp_path / "job", servers=2, prompts=ANSWERS,
                        flags={"sim-instant": True})
    job, result = await run_job(config, timeout_s=240.0)
    assert result.status.done == ANSWERS
    found, classes = walk(job)
    # The walk went through the parts that see every answer.
    assert {"Dispatcher", "Fleet", "Uploader", "StatusBuilder", "LengthEta",
            "QualityGate"} <= classes, sorted(classes)
    big = {path: len(c) for path, c in found.items()
           if len(c) >= ANSWERS // 2 and not (isinstance(c, deque) and c.maxlen is not None)}
    assert big == {}, f"structures holding an item per answer: {big}"
    d = job.dispatcher
    assert d is not None
    assert d.in_flight_requests() == [] and d.eta.running == 0
