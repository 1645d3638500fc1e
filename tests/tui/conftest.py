"""The TUI's tests draw times of day: pin the zone so screens are the same everywhere. A
snapshot that does not match prints which lines of the screen differ."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pytest_textual_snapshot import node_to_report_path

from tests.fixtures.svg_screen import mismatch


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def snap_compare(snap_compare: Callable[..., bool],
                 request: pytest.FixtureRequest) -> Callable[..., bool]:
    """pytest-textual-snapshot's comparison, saying on a mismatch what differs: its HTML
    report is lost with a CI machine, and a clean-clone run once failed a dialog's snapshot
    that passed every time here, with nothing left to tell why."""
    def compare(*args: Any, **kwargs: Any) -> bool:
        same = snap_compare(*args, **kwargs)
        if not same:
            data = pickle.loads(node_to_report_path(request.node).read_bytes())
            expected, actual = data[1], data[2]     # the plugin's (result, expected, actual…)
            print(f"snapshot mismatch in {request.node.nodeid}:\n{mismatch(expected, actual)}")
        return same
    return compare
