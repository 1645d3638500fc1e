"""The tuner's view of the running fleet: samples of every server's goodput counters, the
canary's warm-up and a measured window (measure.py does the arithmetic), and whether the
canary is still READY and how much SGLang retracted on it.

Samples are taken every `[tune].sample_s` from the dispatcher's per-server counters
(ServerProgress.kept_tokens and .answered): reading them costs nothing, and the window's
sub-windows (the noise) need many samples across it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from supervisor.config import TuneSection
from supervisor.servers.fleet import Fleet
from supervisor.servers.server_state import ServerState
from supervisor.tune.measure import (
    Sample,
    Window,
    WindowRule,
    combined_noise,
    gain_of,
    turnover_answers,
    warmed_up,
    window_done,
    window_of,
)


class FleetWindow:
    def __init__(self, fleet: Fleet, dispatcher: Any, cfg: Callable[[], TuneSection],
                 monotonic: Callable[[], float]) -> None:
        self.fleet, self.dispatcher, self.cfg, self.monotonic = fleet, dispatcher, cfg, monotonic

    def sample(self) -> Sample:
        progress = {n: self.dispatcher.progress(n) for n in self.fleet.servers}
        return Sample(self.monotonic(), {n: p.kept_tokens for n, p in progress.items()},
                      {n: p.answered for n, p in progress.items()})

    def retractions(self, name: str) -> float | None:
        """SGLang's num_retracted_reqs counter on `name` (None: no --enable-metrics)."""
        return self._snap(name).sglang.retractions_total

    def left_ready(self, name: str) -> str | None:
        """None while `name` is READY; else its state and why (an OOM's words included)."""
        snap = self._snap(name)
        if snap.state is ServerState.READY:
            return None
        return f"{snap.state.value}: {snap.state_reason}"

    def _snap(self, name: str) -> Any:
        return next(s for s in self.fleet.snapshot() if s.name == name)

    async def warm_up(self, canary: str) -> str | None:
        """Waits out the restarted canary's warm-up; why it left READY meanwhile, or None."""
        cfg = self.cfg()
        start = self.sample()
        while True:
            died = self.left_ready(canary)
            if died is not None:
                return died
            now = self.sample()
            answers = now.answers.get(canary, 0) - start.answers.get(canary, 0)
            # Bounded: a canary that serves a few very long answers may not turn its batch
            # over within a window's length; it is measured then, warm or not.
            if warmed_up(now.at - start.at, answers, cfg.warmup_s,
                         turnover_answers(cfg.warmup_answers, self._snap(canary).max_running)) \
                    or now.at - start.at >= cfg.max_window_s:
                return None
            await anyio.sleep(min(cfg.sample_s, 1.0))

    async def window(self, canary: str, controls: list[str],
                     before: Window | None) -> tuple[Window, str | None]:
        """A measured window: until measure.window_done says it may end (a baseline, with
        `before` None, needs only answers and time), or the canary leaves READY. Also which
        control left READY during it, if one did: a control that stops serving sends its
        share elsewhere and lowers the controls' mean, so the ratio would favour the canary."""
        cfg = self.cfg()
        rule = WindowRule(cfg.min_window_s, cfg.max_window_s, cfg.min_answers, cfg.noise_k)
        gpus = {s.name: max(1, len(s.gpus)) for s in self.fleet.snapshot()}
        samples = [self.sample()]
        disturbed: str | None = None
        while True:
            await anyio.sleep(cfg.sample_s)
            samples.append(self.sample())
            for name in controls:
                gone = self.left_ready(name)
                if gone is not None and disturbed is None:
                    disturbed = f"{name} {gone}"
            w = window_of(samples, canary, controls, gpus)
            gain = gain_of(before, w) if before is not None else None
            noise = combined_noise(before, w) if before is not None else w.noise
            done, _why = window_done(w, gain, noise, rule)
            if done or self.left_ready(canary) is not None:
                return w, disturbed
