"""The simulator's decode meter (supervisor/sim/decode_meter.py) on a hand-moved clock: the
gen_throughput gauge SGLang's scheduler would report (a tick per 40 decode steps, held while
idle, 0 once stale) from the tokens the decoding requests generate, at full speed and in a
collapse."""

from __future__ import annotations

import anyio
import pytest

from supervisor.sim.decode_meter import DecodeMeter, StreamSchedule


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_gauge_is_the_tokens_the_decoding_requests_generate():
    clock = Clock()
    meter = DecodeMeter(tokens_per_s=100, time_scale=1, clock=clock)
    with meter.generating(), meter.generating():
        clock.now += 1.0
        assert meter.read() == pytest.approx(200.0)       # 2 requests x 100 tok/s


def test_a_tick_waits_for_40_decode_steps_and_the_gauge_is_held_meanwhile():
    clock = Clock()
    meter = DecodeMeter(tokens_per_s=100, time_scale=2, clock=clock)   # 200 steps a second
    with meter.generating():
        clock.now += 1.0
        assert meter.read() == pytest.approx(200.0)
        meter.set_speed(0.5)
        clock.now += 0.1                                  # 10 steps at half speed: no tick
        assert meter.read() == pytest.approx(200.0)
        clock.now += 0.3                                  # 40 steps since the tick
        assert meter.read() == pytest.approx(100.0)


def test_a_collapse_and_its_end_show_in_the_gauge():
    clock = Clock()
    meter = DecodeMeter(tokens_per_s=50, time_scale=10, clock=clock)   # 500 tok/s a request
    with meter.generating(), meter.generating(), meter.generating(), meter.generating():
        clock.now += 1.0
        full = meter.read()
        meter.set_speed(1 / 8)
        clock.now += 1.0
        collapsed = meter.read()
        meter.set_speed(1.0)
        clock.now += 1.0
        back = meter.read()
    assert (full, collapsed, back) == pytest.approx((2000.0, 250.0, 2000.0))
    assert meter.seconds_for(500) == pytest.approx(1.0)


def test_idle_the_gauge_is_held_then_zero_once_stale():
    clock = Clock()
    meter = DecodeMeter(tokens_per_s=100, time_scale=1, clock=clock)
    with meter.generating():
        clock.now += 1.0
    assert meter.read() == pytest.approx(100.0)
    clock.now += 29.0
    assert meter.read() == pytest.approx(100.0)            # held, as SGLang holds it
    clock.now += 2.0                                       # 31 s without a token
    assert meter.read() == 0.0


def test_the_first_tick_after_an_idle_spell_is_spread_over_it():
    clock = Clock()
    meter = DecodeMeter(tokens_per_s=100, time_scale=1, clock=clock)
    with meter.generating():
        clock.now += 1.0
    assert meter.read() == pytest.approx(100.0)
    clock.now += 3.0                                       # idle, read meanwhile: held
    assert meter.read() == pytest.approx(100.0)
    with meter.generating():
        clock.now += 1.0
    # SGLang's gap_latency runs from the last tick: 100 tokens over the 4 s since.
    assert meter.read() == pytest.approx(25.0)


def test_the_staleness_is_scaled_with_time():
    clock = Clock()
    meter = DecodeMeter(tokens_per_s=100, time_scale=10, clock=clock)
    with meter.generating():
        clock.now += 1.0
    assert meter.read() > 0
    clock.now += 3.5                                       # 35 simulated seconds
    assert meter.read() == 0.0


def test_instant_tokens_are_counted_when_added():
    clock = Clock()
    meter = DecodeMeter(tokens_per_s=100, time_scale=1, instant=True, clock=clock)
    assert meter.seconds_for(10_000) == 0.0
    meter.read()
    meter.add(300)
    clock.now += 0.5
    assert meter.read() == pytest.approx(600.0)


def test_a_speed_must_not_be_negative():
    with pytest.raises(ValueError, match="decode speed must be 0 or above"):
        DecodeMeter(100, 1).set_speed(-1)


def test_speed_zero_stops_every_stream_until_it_is_set_again():
    """A stuck scheduler (the stall fault) runs no decode step: speed 0 generates nothing."""
    clock = Clock()
    meter = DecodeMeter(100, 1, clock=clock)
    meter.set_speed(0)
    assert meter.rate == 0 and meter.seconds_for(10) == float("inf")
    with meter.generating():
        clock.now += 5
        assert meter.steps() == 0
        meter.set_speed(1)
        clock.now += 1
        assert meter.steps() == pytest.approx(100)


def test_a_bigger_batch_slows_each_stream_and_saturates_the_total():
    """--sim-batch-knee K: n streams each at 1/(1 + (n-1)/K), total bounded by K streams."""
    meter = DecodeMeter(100, 1, batch_knee=4)
    totals = []
    for n in (1, 4, 16, 64):
        meter.decoding = n
        totals.append(n * meter.rate)
        assert meter.rate == pytest.approx(100 / (1 + (n - 1) / 4))
    meter.decoding = 0
    assert totals == sorted(totals) and totals[-1] < 4 * 100


# A streamed request's deltas on the simulated GPU's clock (StreamSchedule). These run on the
# real clock: what they check is that the time a stream spends sending (stood in for by a
# sleep between the steps) is not added to its decode time, so the bounds are wide: without
# the schedule the run takes at least twice the decode time, with it well under 1.5 times.

STEPS, STEP_TOKENS, RATE = 10, 20, 1000          # 20 ms a step, 200 ms of decoding


async def _stream(meter: DecodeMeter, schedule: StreamSchedule | None, send_s: float) -> float:
    never = anyio.Event()
    started = anyio.current_time()
    for _ in range(STEPS):
        assert await meter.step(STEP_TOKENS, never, schedule)
        await anyio.sleep(send_s)               # the delta's send, outside the decode
    return anyio.current_time() - started - send_s


def test_a_streams_sends_do_not_slow_its_decoding():
    decode_s = STEPS * STEP_TOKENS / RATE

    async def main() -> tuple[float, float]:
        meter = DecodeMeter(RATE, 1)
        return (await _stream(meter, StreamSchedule(), send_s=0.02),
                await _stream(meter, None, send_s=0.02))

    scheduled, unscheduled = anyio.run(main)
    assert decode_s * 0.95 <= scheduled < decode_s * 1.5
    assert unscheduled >= decode_s * 1.9            # the old pacing: decode + every send


def test_a_stream_never_runs_ahead_of_its_tokens():
    """With nothing to send, each delta still takes its decode time: the schedule only
    gives back time spent sending, never more."""
    async def main() -> float:
        return await _stream(DecodeMeter(RATE, 1), StreamSchedule(), send_s=0.0)

    assert anyio.run(main) >= STEPS * STEP_TOKENS / RATE * 0.95


def test_a_retracted_or_stuck_stream_starts_its_schedule_again():
    """A retraction (the step's wake) or a stuck scheduler: the request decoded nothing
    meanwhile, so that wait is not credited to its next deltas."""
    async def main() -> None:
        meter = DecodeMeter(RATE, 1)
        schedule = StreamSchedule()
        never = anyio.Event()
        assert await meter.step(STEP_TOKENS, never, schedule)
        assert schedule.due is not None
        retracted = anyio.Event()
        retracted.set()
        assert not await meter.step(STEP_TOKENS, retracted, schedule)
        assert schedule.due is None
        await anyio.sleep(0.1)                      # waiting in the queue
        begun = anyio.current_time()
        assert await meter.step(STEP_TOKENS, never, schedule)
        assert anyio.current_time() - begun >= STEP_TOKENS / RATE * 0.95

        meter.set_speed(0)
        schedule.due = anyio.current_time() - 1.0   # a second behind, then stuck
        async with anyio.create_task_group() as tg:
            tg.start_soon(meter.step, STEP_TOKENS, never, schedule)
            await anyio.sleep(0.05)
            assert schedule.due is None
            meter.set_speed(1)
        assert schedule.due is not None

    anyio.run(main)


def test_the_schedule_is_the_simulators_flag_off_by_default():
    """`--sim-stream-on-schedule` turns it on for a server's streams (chat_stream.py); the
    default keeps the pacing the suite's timing-bound tests were written against."""
    from supervisor.sim.options import parse_options
    base = ["--model-path", "sim/m", "--port", "30000"]
    assert parse_options(base).stream_on_schedule is False
    assert parse_options([*base, "--sim-stream-on-schedule"]).stream_on_schedule is True
