"""Words at 80 columns: who acted comes right after an event's time, so a long event cut at
the edge loses its tail, not its actor; the histogram's title fits its half of the screen."""

from __future__ import annotations

from textual.app import App, ComposeResult

from tests.fixtures import tui_status_data as data
from tui.widgets.activity.event_list import EventList

LOOP = data.event(201, "loop_aborted", "gpu0", {
    "part": "reasoning", "prompt": "demo-000092", "tokens": 2113, "saved": 1983,
    "snippet": "Wait, let me reconsider. Wait, let me reconsider. " * 3})


class _Events(App[None]):
    def compose(self) -> ComposeResult:
        yield EventList()


async def test_the_actor_comes_before_a_description_cut_at_80_columns() -> None:
    """` 14:02 supervisor  gpu0 stopped a loop…`: the actor survives the cut."""
    app = _Events()
    async with app.run_test(size=(80, 6)) as pilot:
        widget = app.query_one(EventList)
        widget.events = (data.EVENTS[-1], LOOP)
        await pilot.pause()
        lines = str(widget.render()).splitlines()
    loop = next(line for line in lines if "stopped a loop" in line)
    assert len(loop) <= 80 and loop.endswith("…")
    assert loop.split()[1:3] == ["supervisor", "gpu0"], loop
    requeue = next(line for line in lines if "requeued 412" in line)
    assert "alice (pid 52311)  requeued 412 truncated prompts" in requeue


async def test_the_histogram_title_fits_half_an_80_column_screen() -> None:
    """At 80x24 the title keeps the limit and what the bars count, uncut."""
    from tests.fixtures.fake_daemon_client import FakeDaemon
    from tests.tui.narrow_data import demo_fleet
    from tests.tui.test_narrow_terminal import SMALL, STILL, settled
    from tui.app import make_app
    from tui.widgets.job.length_histogram import LengthHistogram

    app = make_app(FakeDaemon(demo_fleet()), timing=STILL)
    async with app.run_test(size=SMALL) as pilot:
        await settled(pilot)
        title = str(app.screen.query_one(LengthHistogram).render()).splitlines()[0]
    assert "…" not in title and "4,096" in title and "recent" in title, title


async def test_a_toast_reaches_the_right_edge_leaving_nothing_behind_it() -> None:
    """No cells of the screen beneath show to the right of a toast (column 80 at 80x24)."""
    from tests.fixtures.fake_daemon_client import FakeDaemon
    from tests.tui.narrow_data import demo_fleet
    from tests.tui.test_narrow_terminal import SMALL, STILL, settled
    from tui.app import make_app

    app = make_app(FakeDaemon(demo_fleet()), timing=STILL)
    async with app.run_test(size=SMALL, notifications=True) as pilot:
        await settled(pilot)
        app.notify("paused: paused by operator", title="pause")
        await settled(pilot)
        await pilot.pause(0.2)
        toast = app.screen.query_one("Toast")
        assert toast.region.right == SMALL[0], toast.region


async def test_a_goodput_drop_names_the_cause_that_lost_the_most() -> None:
    """Right after a requeue, goodput falls: `lost to requeue 80%` beside it says why."""
    from dataclasses import replace

    from supervisor.contract.status import Waste, WasteCount
    from tui.widgets.job.job_progress import JobProgress

    class _Job(App[None]):
        def compose(self) -> ComposeResult:
            yield JobProgress()

    waste = Waste(kept_tokens=760, wasted_tokens=240, goodput=0.76,
                  causes=(WasteCount("loop", 10, 48), WasteCount("requeue", 30, 192)))
    app = _Job()
    async with app.run_test(size=(120, 4)) as pilot:
        widget = app.query_one(JobProgress)
        widget.status = replace(data.healthy(), waste=waste)
        await pilot.pause()
        shown = str(widget.render())
    assert "goodput 76.0%" in shown and "lost to requeue 80%" in shown, shown
