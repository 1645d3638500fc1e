"""The loop detector on loops (short, long, numbered, echoed, without spaces) and on text
that repeats in shape but is not a loop."""

from __future__ import annotations

import random
from pathlib import Path

from supervisor.dispatch.loop_detector import TAIL_BYTES, is_loop, loop_score, tail_of
from supervisor.sim.filler_text import filler

REPO = Path(__file__).resolve().parents[2]


def test_a_short_loop_inside_the_thinking_is_flagged():
    thought = filler(800, 3) + " " + "so the answer is 4, let me check again. " * 300
    assert is_loop("", thought, "length")
    # The same text from an answer that stopped by itself is not a degenerate loop.
    assert not is_loop("", thought, "stop")


def test_numbered_repeats_count_as_the_same_text():
    text = filler(500, 9) + " " + " ".join(
        f"Step {i}: we compute the value again and it is {3 * i}." for i in range(400))
    score = loop_score(text)
    assert score.looping and score.repeat_share > 0.9


def test_a_loop_of_a_few_hundred_words_is_caught():
    passage = filler(300, 77)
    score = loop_score(filler(400, 1) + " " + " ".join([passage] * 8))
    assert score.looping and score.repeat_share > 0.5


def test_a_loop_without_spaces_is_caught_by_characters():
    rng = random.Random(5)
    alphabet = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
    prose = "".join(rng.choice(alphabet) for _ in range(3000))
    assert not loop_score(prose).looping
    loop = prose[:500] + "我们再检查一遍这个数值是否正确。" * 200
    assert loop_score(loop).looping


def test_prose_code_and_numbered_lists_are_not_loops():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    code = (REPO / "supervisor" / "dispatch" / "dispatcher.py").read_text(encoding="utf-8")
    listing = "\n".join(f"{i}. {filler(12, 40 * i)}" for i in range(1, 300))
    for text in (readme, code, listing, filler(4000, 11)):
        score = loop_score(text)
        assert not score.looping, score
        assert score.compression_ratio > 0.25


def test_only_the_tail_is_read():
    early_loop = "again and again " * 2000 + filler(3000, 5)
    assert not loop_score(early_loop).looping
    assert len(tail_of(early_loop, None).encode()) <= TAIL_BYTES
    # The answer follows the thinking: a loop at the end of the answer is the tail.
    assert tail_of("end of answer", "thinking").endswith("end of answer")


def test_too_little_text_says_nothing():
    assert not loop_score("la la la la la la la la").looping
