"""What the operator sees, from fixed contract data (pytest-textual-snapshot). Update the
pictures with `pytest tests/tui --snapshot-update` after a deliberate change, and look at
them (the report the plugin writes) before committing."""

from __future__ import annotations

from tests.fixtures import tui_status_data as data
from tests.fixtures.tui_pilot import NARROW, WIDE, app_with, settled


def test_main_screen_healthy(snap_compare) -> None:
    """Eight READY servers mid-job at 100x30: progress, charts, table, uploads, events."""
    assert snap_compare(app_with(), terminal_size=WIDE, run_before=settled)


def test_main_screen_healthy_80x24(snap_compare) -> None:
    """The same job on an 80x24 terminal: every region still readable."""
    assert snap_compare(app_with(), terminal_size=NARROW, run_before=settled)


def test_eta_interval_loops_and_energy(snap_compare) -> None:
    """The ETA with its 80% interval, the loop share beside truncation, kWh so far/projected,
    J per token, and tokens per joule in each server's power cell."""
    assert snap_compare(app_with(data.with_insight), terminal_size=WIDE, run_before=settled)


def test_paused_by_quality_gate(snap_compare) -> None:
    """A banner says dispatch is paused by the quality gate and why; p offers resume."""
    assert snap_compare(app_with(data.paused_by_quality), terminal_size=WIDE,
                        run_before=settled)


def test_paused_by_the_breaker(snap_compare) -> None:
    """Every request refused (HTTP 400): a red banner with the share and SGLang's message,
    the error share beside failed."""
    assert snap_compare(app_with(data.paused_by_breaker), terminal_size=WIDE,
                        run_before=settled)


def test_paused_on_answers_cut_off_inside_the_thinking(snap_compare) -> None:
    """Truncation split: the share cut off inside the thinking in red beside trunc, and the
    quality gate's banner saying why it paused."""
    assert snap_compare(app_with(data.thinking_cut_off), terminal_size=WIDE,
                        run_before=settled)


def test_failed_server(snap_compare) -> None:
    """A FAILED server gets a banner with its reason, besides its red state cell."""
    assert snap_compare(app_with(data.with_failed_server), terminal_size=WIDE,
                        run_before=settled)


def test_failed_server_selected_offers_reset(snap_compare) -> None:
    """With the FAILED row selected the footer offers f (reset FAILED)."""
    assert snap_compare(app_with(data.with_failed_server), terminal_size=WIDE,
                        press=["down"] * 5, run_before=settled)


def test_uploads_stopped(snap_compare) -> None:
    """Stopped uploads get a banner, and the uploads line shows the backlog and last error."""
    assert snap_compare(app_with(data.uploads_stopped), terminal_size=WIDE,
                        run_before=settled)


def test_disconnected_keeps_last_figures(snap_compare) -> None:
    """The daemon went away: a DISCONNECTED banner over the last figures received."""
    assert snap_compare(app_with(dies_after_first="Connection refused"),
                        terminal_size=WIDE, run_before=settled)


def test_no_daemon_at_start(snap_compare) -> None:
    """Started with no daemon answering: the banner says so; nothing else pretends."""
    assert snap_compare(app_with(None, down="No such file or directory"),
                        terminal_size=WIDE, run_before=settled)


def test_help_screen(snap_compare) -> None:
    """? lists every key with what it does."""
    assert snap_compare(app_with(), terminal_size=WIDE, press=["question_mark"],
                        run_before=settled)


def test_readonly(snap_compare) -> None:
    """--readonly: no action keys in the footer, and the title says read-only."""
    assert snap_compare(app_with(readonly=True), terminal_size=WIDE, run_before=settled)


def test_max_tokens_dialog(snap_compare) -> None:
    """m, the daemon keeping no tokens: the limit doubled, requeue from scratch chosen."""
    assert snap_compare(app_with(), terminal_size=WIDE, press=["m"], run_before=settled)


def test_restart_server_dialog(snap_compare) -> None:
    """r on the selected row asks before restarting that one server."""
    assert snap_compare(app_with(), terminal_size=WIDE, press=["down", "down", "r"],
                        run_before=settled)


def test_rolling_restart_dialog(snap_compare) -> None:
    """R asks before restarting every server one at a time."""
    assert snap_compare(app_with(), terminal_size=WIDE, press=["R"], run_before=settled)


def test_retune_dialog(snap_compare) -> None:
    """t lists the selected server's flags and takes name=value changes."""
    assert snap_compare(app_with(), terminal_size=WIDE, press=["t"], run_before=settled)


def test_reset_dialog(snap_compare) -> None:
    """f on a FAILED server asks before clearing its failures, quoting why it failed."""
    assert snap_compare(app_with(data.with_failed_server), terminal_size=WIDE,
                        press=["down"] * 5 + ["f"], run_before=settled)


def test_pause_dialog(snap_compare) -> None:
    """p asks for the reason the pause is recorded with."""
    assert snap_compare(app_with(), terminal_size=WIDE, press=["p"], run_before=settled)


def test_resume_dialog(snap_compare) -> None:
    """p while paused asks before resuming, naming what holds the job."""
    assert snap_compare(app_with(data.paused_by_quality), terminal_size=WIDE, press=["p"],
                        run_before=settled)


def test_requeue_dialog(snap_compare) -> None:
    """u says how many truncated prompts would go back to pending."""
    assert snap_compare(app_with(), terminal_size=WIDE, press=["u"], run_before=settled)


def test_server_log(snap_compare) -> None:
    """enter shows the selected server's log, scrolled to its end."""
    assert snap_compare(app_with(), terminal_size=WIDE, press=["enter"], run_before=settled)
