"""The TUI's tests draw times of day: pin the zone so screens are the same everywhere. The
pilot waits for the app to have handled what it sent, counted in event-loop turns. A
snapshot that does not match prints which lines of the screen differ."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pytest_textual_snapshot import node_to_report_path
from textual.pilot import Pilot

from tests.fixtures.svg_screen import mismatch
from tests.fixtures.tui_pilot import drained


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


@pytest.fixture(autouse=True)
def pilot_waits_for_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """After each key press, pause and click, the pilot also waits until the app has handled
    what it set off (tests.fixtures.tui_pilot.drained). Textual's pilot guesses that from
    the process's CPU time, which reads as idle at once on a process starved of CPU: with
    that guess made to say idle at once, 23 of these tests failed (a dialog not open yet
    when the test typed into it), and none do with this wait."""
    for name in ("press", "pause", "_post_mouse_events"):
        original = getattr(Pilot, name)

        async def waits(self: Pilot, *args: Any, _original: Any = original,
                        **kwargs: Any) -> Any:
            result = await _original(self, *args, **kwargs)
            await drained(self)
            return result
        monkeypatch.setattr(Pilot, name, waits)
