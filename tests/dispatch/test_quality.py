from supervisor.dispatch.quality import (
    EMPTY_CONTENT,
    LOOP,
    MISSING_REASONING,
    THINK_MARKERS,
    THINKING_TRUNCATED,
    TRUNCATED,
    QualityGate,
    check_completion,
)


def test_good_completion_has_no_problems():
    v = check_completion("The answer is 4.", "2+2 is 4", "stop", thinking=True)
    assert v.problems == () and not v.bad and not v.truncated


def test_empty_content_and_missing_reasoning_are_bad():
    v = check_completion("", None, "stop", thinking=True)
    assert set(v.problems) == {EMPTY_CONTENT, MISSING_REASONING} and v.bad


def test_cut_off_inside_thinking_is_truncation_in_the_thinking_not_empty():
    v = check_completion("", "still thinking about", "length", thinking=True)
    assert v.problems == (TRUNCATED, THINKING_TRUNCATED) and v.truncated and not v.bad
    assert v.in_thinking


def test_cut_off_in_the_answer_is_not_truncation_in_the_thinking():
    v = check_completion("The answer beg", "thought it through", "length", thinking=True)
    assert v.problems == (TRUNCATED,) and v.truncated and not v.in_thinking


def test_empty_content_with_blank_reasoning_at_length_is_empty_not_in_thinking():
    # Nothing was written anywhere: no thinking to have been cut off in.
    v = check_completion("", "  ", "length", thinking=True)
    assert not v.in_thinking and EMPTY_CONTENT in v.problems and v.bad


def test_leftover_think_markers_are_bad():
    v = check_completion("<think>hmm</think> 4", None, "stop", thinking=False)
    assert v.problems == (THINK_MARKERS,) and v.bad


def test_without_thinking_reasoning_is_not_required():
    assert check_completion("4", None, "stop", thinking=False).problems == ()


def test_gate_waits_for_min_samples_then_trips_on_bad_rate():
    gate = QualityGate(window=10, min_samples=5, max_bad_rate=0.5)
    bad = check_completion("", None, "stop", thinking=True)
    good = check_completion("x", "y", "stop", thinking=True)
    assert [gate.observe(bad) for _ in range(4)] == [None] * 4
    reason = gate.observe(bad)
    assert reason is not None and "100% of the last 5" in reason and "empty_content 5" in reason
    gate.reset()
    for _ in range(10):
        assert gate.observe(good) is None
    snap = gate.snapshot()
    assert snap.samples == 10 and snap.bad_rate == 0 and snap.bad_total == 5


def test_gate_window_slides():
    gate = QualityGate(window=4, min_samples=4, max_bad_rate=0.5)
    bad = check_completion("", None, "stop", thinking=True)
    good = check_completion("x", "y", "stop", thinking=True)
    # 50% is not above the threshold; the oldest completion leaves the window each time.
    for v in (bad, bad, good, good, bad, bad):
        assert gate.observe(v) is None
    assert gate.snapshot().bad_rate == 0.5
    assert gate.observe(bad) is not None        # good, bad, bad, bad
    assert gate.snapshot().bad_rate == 0.75


def test_truncation_threshold_trips_separately():
    gate = QualityGate(window=4, min_samples=4, max_bad_rate=0.5, max_truncation_rate=0.5)
    trunc = check_completion("", "thinking", "length", thinking=True)
    for _ in range(3):
        assert gate.observe(trunc) is None
    reason = gate.observe(trunc)
    assert reason is not None and reason.startswith("truncation")
    assert gate.snapshot().truncation_rate == 1.0


def test_a_loop_is_truncation_not_bad_output_and_only_when_truncated():
    v = check_completion("", "again and again", "length", thinking=True, loop=True)
    assert v.problems == (TRUNCATED, LOOP, THINKING_TRUNCATED) and v.looping and not v.bad
    assert check_completion("4", "x", "stop", thinking=True, loop=True).problems == ()


def test_truncation_splits_into_long_and_looping_and_the_loop_share_can_pause():
    gate = QualityGate(window=10, min_samples=10, max_bad_rate=0.5, max_loop_rate=0.3)
    long = check_completion("", "thinking on", "length", thinking=True)
    loop = check_completion("", "la la", "length", thinking=True, loop=True)
    good = check_completion("x", "y", "stop", thinking=True)
    for v in [long] * 4 + [loop] * 3 + [good] * 2:
        assert gate.observe(v) is None
    snap = gate.snapshot()
    assert (snap.truncation_rate, snap.long_rate, snap.loop_rate) == (7 / 9, 4 / 9, 3 / 9)
    reason = gate.observe(loop)
    assert reason is not None and reason.startswith("degenerate loops: 40% of the last 10")
    assert gate.snapshot().loop_total == 4


def test_truncation_splits_into_in_the_thinking_and_in_the_answer():
    gate = QualityGate(window=10, min_samples=10, max_bad_rate=0.5)
    thinking = check_completion("", "hmm, let me", "length", thinking=True)
    answer = check_completion("So the answer", "done thinking", "length", thinking=True)
    good = check_completion("x", "y", "stop", thinking=True)
    for v in [thinking] * 3 + [answer] * 2 + [good] * 5:
        assert gate.observe(v) is None
    snap = gate.snapshot()
    assert (snap.truncation_rate, snap.thinking_truncated_rate, snap.answer_truncated_rate) \
        == (0.5, 0.3, 0.2)
    assert snap.thinking_truncated_total == 3 and snap.truncated_total == 5
    assert snap.problems[THINKING_TRUNCATED] == 3
    # The window slides: the three cut in the thinking leave it.
    for _ in range(3):
        gate.observe(good)
    snap = gate.snapshot()
    assert snap.thinking_truncated_rate == 0 and snap.thinking_truncated_total == 3


def test_answers_cut_off_inside_the_thinking_pause_on_their_own_threshold():
    """The "87% empty answers" job: the thinking budget ran out before any answer."""
    gate = QualityGate(window=20, min_samples=10, max_bad_rate=0.5,
                       max_thinking_truncated_rate=0.5)
    thinking = check_completion("", "step one, step two", "length", thinking=True)
    answer = check_completion("partial answ", "thought", "length", thinking=True)
    good = check_completion("x", "y", "stop", thinking=True)
    # Answers cut in the answer do not count toward it, however many.
    for v in [answer] * 9 + [good]:
        assert gate.observe(v) is None
    gate.reset()
    trips = [gate.observe(v) for v in [thinking] * 9 + [good] * 1]
    assert trips[-1] is not None and trips[:-1] == [None] * 9
    assert trips[-1].startswith("truncated inside the thinking: 90% of the last 10 completions")
    assert "threshold 50%" in trips[-1]
