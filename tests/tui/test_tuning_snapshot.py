"""The tuning screen as the operator sees it (pytest-textual-snapshot; update with
`pytest tests/tui/test_tuning_snapshot.py --snapshot-update` after a deliberate change)."""

from __future__ import annotations

from tests.fixtures import tui_status_data as data
from tests.fixtures.tui_pilot import NARROW, WIDE, app_with, settled


def test_tuning_screen_mid_search(snap_compare) -> None:
    """T at 100x30: a TRIAL on gpu2, +41% kept, the best flags, four trials (two kept, one
    OOM'd, one measuring) with their figures and reasons; x stop offered."""
    assert snap_compare(app_with(data.tuning), terminal_size=WIDE, press=["T"],
                        run_before=settled)


def test_tuning_screen_80x24(snap_compare) -> None:
    """The same search on 80 columns: every figure of every trial still shown, the reasons
    cut at the edge."""
    assert snap_compare(app_with(data.tuning), terminal_size=NARROW, press=["T"],
                        run_before=settled)


def test_tune_start_dialog_80x24(snap_compare) -> None:
    """s on a daemon not tuning: the start dialog (space, canary, force) fits 80x24."""
    assert snap_compare(app_with(), terminal_size=NARROW, press=["T", "s"],
                        run_before=settled)
