"""The batch's decode speed and SGLang's `gen_throughput`, from one account of the tokens the
simulated GPU generates.

Every decoding request generates `tokens_per_s × time_scale × speed` tokens a real second;
`speed` is 1 until a throughput collapse (`--sim-fault collapse`, faults.py) divides it by
the collapse factor, and back to 1 when the fault is lifted. Requests follow a change of
speed mid-decode (`decode` re-times the rest), so the gauge and the tokens the clients see
slow down and recover together (a streamed request from its next delta, `step`).

The gauge is measured as SGLang's scheduler measures it
(`sglang/srt/managers/scheduler_components/metrics_reporter.py` log_decode_stats): every
`decode_log_interval` (40) decode steps, tokens generated since the last tick divided by the
time since it (so the first tick after an idle spell, spread over it, reads low); held
while nothing decodes, and read as 0 once no tick came for GEN_THROUGHPUT_STALENESS_SECONDS
(30 s; `_current_gen_throughput`). Here a decode step is one token of every running request,
and the tick happens when the gauge is read, at least 40 steps after the last one. Requests
that hold a slot without decoding (stuck, stalled) generate nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio

from .flag_response import stream_factor

DECODE_LOG_INTERVAL = 40            # server_args.py decode_log_interval default
STALENESS_S = 30.0                  # metrics_reporter.py GEN_THROUGHPUT_STALENESS_SECONDS


class StreamSchedule:
    """When a streamed request's tokens so far were generated, on the simulated GPU's clock.

    SGLang's scheduler does not wait for a request's output to be sent: the detokenizer and
    the HTTP server run in other processes while the GPU decodes the next steps, and a reader
    that lags gets the queued deltas joined (chat_stream.py). A stream that slept a delta's
    decode time after the previous delta went out would add its own send (the JSON, the
    write, its turn on the event loop) and the loop's timer lateness to every delta: ~8% of
    decode time at 16-token deltas, 32 streams a server, on a 2-core machine, growing with
    whatever else loads the CPU (a streamed answer then takes longer than its tokens at the
    simulated rate, and longer than the same answer unstreamed). With a schedule, each delta
    is due its decode time after the last one was due; one sent late is followed at once by
    the next, until the stream is back on time. A retraction or a stuck scheduler resets it
    (the request decoded nothing meanwhile)."""

    __slots__ = ("due",)

    def __init__(self) -> None:
        self.due: float | None = None     # the meter's clock


class DecodeMeter:
    def __init__(self, tokens_per_s: float, time_scale: float, instant: bool = False,
                 clock: Callable[[], float] = time.monotonic, batch_knee: int = 0,
                 batch_peak: int = 0) -> None:
        self._clock = clock
        # 0: every request decodes at the full rate however many run. N: a batch of n
        # decodes each at 1 / (1 + (n - 1) / N) of it, so one stream slows as the batch
        # grows while the batch's total saturates at N times one stream's (a GPU step costs
        # more the more rows it carries, until it is compute-bound).
        self.batch_knee = batch_knee
        # P: each of n streams at (P² + 1) / (P² + n²) instead, the total peaking at n = P
        # (flag_response.py).
        self.batch_peak = batch_peak
        # Tokens one request decodes a real second at full speed (inf: --sim-instant).
        self.full_rate = math.inf if instant else tokens_per_s * time_scale
        self.time_scale = time_scale
        self.speed = 1.0
        self.decoding = 0                 # requests generating tokens now
        self._tokens = 0.0                # generated since start (an exact integral)
        self._steps = 0.0                 # decode steps since start (while any decodes)
        self._at = clock()                # when _tokens was last brought up to date
        self._tic_at = self._at           # the last decode-stats tick
        self._tic_tokens = 0.0
        self._tic_steps = 0.0
        self._last_token_at = self._at
        self.gen_throughput = 0.0         # the gauge, as of the last tick
        # Set (and dropped) when the speed changes; made by the first decode (an Event
        # needs the running loop).
        self._changed: anyio.Event | None = None

    @property
    def rate(self) -> float:
        """Tokens one request decodes a real second now (0 while the scheduler is stuck)."""
        if self.speed == 0:
            return 0.0
        return (self.full_rate * self.speed
                * stream_factor(self.decoding, self.batch_knee, self.batch_peak))

    def _signal_change(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _settle(self) -> float:
        now = self._clock()
        rate = self.rate
        if self.decoding and math.isfinite(rate) and rate > 0:
            self._tokens += self.decoding * rate * (now - self._at)
            self._steps += rate * (now - self._at)
            self._last_token_at = now
        self._at = now
        return now

    def set_speed(self, speed: float) -> None:
        """Decode at `speed` times the full rate from now on (requests in flight too);
        0 stops every stream (a stuck scheduler) until the speed is set again."""
        if not speed >= 0:
            raise ValueError(f"decode speed must be 0 or above, got {speed}")
        self._settle()
        self.speed = speed
        self._signal_change()

    @property
    def last_token_at(self) -> float:
        """When (clock time) the last token was generated."""
        self._settle()
        return self._last_token_at

    def steps(self) -> float:
        """Tokens one request has decoded since start (the scheduler's decode steps)."""
        self._settle()
        return self._steps

    def seconds_for(self, tokens: float) -> float:
        """How long `tokens` take one request at the present speed."""
        rate = self.rate
        return 0.0 if math.isinf(rate) else (math.inf if rate == 0 else tokens / rate)

    def add(self, tokens: float) -> None:
        """Tokens generated in no time (--sim-instant): counted when they are."""
        now = self._settle()
        if tokens:
            self._tokens += tokens
            self._last_token_at = now

    @contextmanager
    def generating(self) -> Iterator[None]:
        """Held while one request generates tokens."""
        self._settle()
        self.decoding += 1
        if self.batch_knee or self.batch_peak:
            self._signal_change()        # every stream's speed changes with the batch
        try:
            yield
        finally:
            self._settle()
            self.decoding -= 1
            if self.batch_knee or self.batch_peak:
                self._signal_change()

    async def decode(self, tokens: float, abort: anyio.Event,
                     interrupt: anyio.Event | None = None) -> int:
        """Generate `tokens` for one request at whatever speed holds meanwhile; returns the
        tokens generated when `abort` (or `interrupt`: a retraction) is set first (all of
        them otherwise)."""
        done = await self._run(tokens, abort, interrupt)
        return int(tokens) if done >= tokens else int(done)

    async def step(self, tokens: float, wake: anyio.Event,
                   schedule: StreamSchedule | None = None) -> bool:
        """One short stretch of a request (a streamed delta): True when it was generated
        whole, False when `wake` (an abort or a retraction) came first. Cheaper than
        `decode` (no task group unless the scheduler is stuck): a change of speed applies
        from the next step; a stuck scheduler (speed 0) holds the step until it moves.
        With a `schedule`, the stretch is due `tokens / rate` after the last one was due,
        not after this call: see StreamSchedule."""
        if math.isinf(self.rate):
            self.add(tokens)
            return True
        with self.generating():
            while self.rate == 0 and not wake.is_set():
                if schedule is not None:
                    schedule.due = None      # stuck: nothing of it decoded meanwhile
                if self._changed is None:
                    self._changed = anyio.Event()
                await _first_of(wake, self._changed)
            if wake.is_set():
                if schedule is not None:
                    schedule.due = None
                return False
            wait = tokens / self.rate
            if schedule is not None:
                now = self._clock()
                schedule.due = (now if schedule.due is None else schedule.due) + wait
                wait = max(0.0, schedule.due - now)
            with anyio.move_on_after(wait):
                await wake.wait()
        if wake.is_set():
            if schedule is not None:
                schedule.due = None          # retracted or aborted: off the GPU
            return False
        return True

    async def _run(self, tokens: float, abort: anyio.Event,
                   interrupt: anyio.Event | None) -> float:
        if math.isinf(self.rate):
            self.add(tokens)
            return tokens
        done = 0.0

        def stopped() -> bool:
            return abort.is_set() or (interrupt is not None and interrupt.is_set())

        with self.generating():
            while done < tokens - 1e-9 and not stopped():
                if self._changed is None:
                    self._changed = anyio.Event()
                rate, changed, started = self.rate, self._changed, anyio.current_time()
                events = [abort, changed] + ([interrupt] if interrupt is not None else [])
                with anyio.move_on_after((tokens - done) / rate if rate > 0 else math.inf):
                    await _first_of(*events)
                done += (anyio.current_time() - started) * rate
        return min(done, tokens)

    def generated(self) -> float:
        """Tokens decoded since start, up to now."""
        self._settle()
        return self._tokens

    def read(self) -> float:
        """The gauge now: a decode-stats tick first if 40 steps have passed since the last."""
        now = self._settle()
        steps = self._steps - self._tic_steps if math.isfinite(self.rate) else math.inf
        if self._tokens > self._tic_tokens and steps >= DECODE_LOG_INTERVAL - 1e-6:
            self.gen_throughput = (self._tokens - self._tic_tokens) / max(1e-9, now - self._tic_at)
            self._tic_at, self._tic_tokens, self._tic_steps = now, self._tokens, self._steps
        elif self._tokens == self._tic_tokens and \
                now - self._last_token_at > STALENESS_S / self.time_scale:
            # No decoding since the tick: SGLang logs nothing and the gauge is held, until
            # it is read as 0 once stale. (The tick stays where it was, as SGLang's
            # last_decode_stats_tic does: the first tick after an idle spell is spread over
            # it, and reads low.)
            self.gen_throughput = 0.0
        return self.gen_throughput


async def _first_of(*events: anyio.Event) -> None:
    """Return when any of the events is set."""
    async with anyio.create_task_group() as tg:
        async def wait(e: anyio.Event) -> None:
            await e.wait()
            tg.cancel_scope.cancel()
        for event in events:
            tg.start_soon(wait, event)
