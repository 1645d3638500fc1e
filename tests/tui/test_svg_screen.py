"""The snapshot-mismatch printer reads a screenshot back as the screen's text."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.svg_screen import mismatch, screen_lines

SNAP = Path(__file__).parent / "__snapshots__" / "test_continue_dialog"


def test_a_screenshot_reads_back_as_its_lines() -> None:
    lines = screen_lines((SNAP / "test_continue_offered_first_at_80_columns.svg").read_text())
    assert len(lines) == 23                 # the first and the 24th lines are blank
    assert lines[0] == "" and lines[1].lstrip().startswith("█▀ Max tokens")
    assert any("Continue 1,733 truncated answers: 7.1M tokens kept" in line for line in lines)


def test_a_mismatch_names_the_changed_line_or_says_only_styles_differ() -> None:
    svg = (SNAP / "test_continue_offered_first_at_80_columns.svg").read_text()
    changed = svg.replace("1,733", "1,734")
    assert "+" in mismatch(svg, changed) and "1,734" in mismatch(svg, changed)
    recoloured = svg.replace("#0178d4", "#0178d5")
    assert mismatch(svg, recoloured).startswith("the text is the same;")
