"""The progress watchdog on its own (no processes): hung means requests in flight and no
token for hang_timeout_s (servers/hang_rule.py), never "no completion"; without any token
signal, no completion for the longest answer at the measured speed."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import anyio

from supervisor.config import DispatchSection, GenerationSection, JobConfig, ServersSection
from supervisor.config.live_settings import LiveSettings
from supervisor.dispatch.dispatch_snapshot import ServerProgress
from supervisor.dispatch.rate_window import CompletionRateWindow
from supervisor.servers.exit_classifier import Trigger
from supervisor.servers.fleet_context import FleetContext
from supervisor.servers.hang_rule import HangRule, ProgressReading
from supervisor.servers.managed_server import ManagedServer
from supervisor.servers.process_launcher import ProcessLauncher
from supervisor.servers.restart_policy import LifeEnd, RestartPolicy
from supervisor.servers.server_log import ServerLog
from supervisor.servers.watchers import Decision, watch_progress

SERVERS = replace(ServersSection(count=1, model_path="m"), hang_timeout_s=0.3,
                  health_interval_s=0.02)


async def _watch(read, seconds: float) -> Decision:
    decision = Decision()
    with anyio.move_on_after(seconds):
        with decision.scope:
            await watch_progress(read, lambda: SERVERS, decision, HangRule(anyio.current_time()))
    return decision


async def test_tokens_without_a_completion_are_progress() -> None:
    # Every answer is longer than the timeout: tokens flow, nothing completes for 5 timeouts.
    def read() -> ProgressReading:
        return ProgressReading(in_flight=16, token_at=anyio.current_time(), token_signal=True,
                               completed=0)
    assert (await _watch(read, 1.5)).outcome is None


async def test_no_token_for_the_timeout_is_a_hang_whatever_completes() -> None:
    # Outcomes keep coming (aborts, errors), but no stream has made a token: hung.
    state = {"completed": 0}

    def read() -> ProgressReading:
        state["completed"] += 1
        return ProgressReading(in_flight=3, token_at=None, token_signal=True,
                               completed=state["completed"])
    t0 = anyio.current_time()
    decision = await _watch(read, 10)
    assert decision.outcome is not None and decision.outcome.trigger is Trigger.PROGRESS
    assert decision.outcome.detail.startswith("3 requests in flight, no token for")
    assert anyio.current_time() - t0 >= SERVERS.hang_timeout_s


async def test_idleness_is_not_a_hang_and_the_clock_starts_when_busy() -> None:
    state = {"in_flight": 0}

    def read() -> ProgressReading:
        return ProgressReading(in_flight=state["in_flight"], token_at=None, token_signal=True,
                               completed=0)
    async with anyio.create_task_group() as tg:
        decision = Decision()

        async def watch() -> None:
            with decision.scope:
                await watch_progress(read, lambda: SERVERS, decision,
                                     HangRule(anyio.current_time()))
        tg.start_soon(watch)
        await anyio.sleep(1.0)                  # idle for three timeouts: nothing
        assert decision.outcome is None
        busy_at = anyio.current_time()
        state["in_flight"] = 2
        with anyio.fail_after(10):
            while decision.outcome is None:
                await anyio.sleep(0.02)
        assert anyio.current_time() - busy_at >= SERVERS.hang_timeout_s


def test_a_token_from_the_last_life_does_not_count() -> None:
    rule = HangRule(started_at=100.0)
    old = ProgressReading(in_flight=1, token_at=99.0, token_signal=True, completed=0)
    assert rule.observe(old, 100.0, 5.0) is None
    assert rule.observe(old, 105.5, 5.0) is not None
    assert rule.life.span_s == 0.0


def test_the_life_records_the_span_of_its_progress() -> None:
    rule = HangRule(started_at=0.0)
    for t in (1.0, 50.0, 400.0):
        rule.observe(ProgressReading(1, t, True, 0), t, 600.0)
    assert rule.life.span_s == 399.0


def test_without_a_token_signal_the_derived_timeout_holds() -> None:
    rule = HangRule(started_at=0.0)
    r = ProgressReading(in_flight=4, token_at=None, token_signal=False, completed=0,
                        derived_timeout_s=100.0, derived_from="test")
    assert rule.observe(r, 1.0, 10.0) is None
    assert rule.observe(r, 50.0, 10.0) is None         # past hang_timeout_s, within derived
    reason = rule.observe(r, 102.0, 10.0)
    assert reason is not None and "none completed for 101 s" in reason
    assert "no token signal: timeout 100 s, test" in reason


def _server(tmp_path: Path, dispatcher: object, dispatch: DispatchSection) -> ManagedServer:
    async def store_call(*args: object) -> None:
        return None

    ctx = FleetContext(store_call=store_call, dispatcher=dispatcher, client=None,  # type: ignore[arg-type]
                       clock=time.time, monotonic=time.monotonic, on_change=lambda: None,
                       proc_limiter=anyio.CapacityLimiter(1), launcher=ProcessLauncher())
    live = LiveSettings(JobConfig(servers=SERVERS, dispatch=dispatch,
                                  generation=GenerationSection(max_tokens=1000)))
    return ManagedServer("gpu0", (0,), 30000, live, ctx,
                         ServerLog(tmp_path / "gpu0.log"), RestartPolicy.from_config(SERVERS))


class Dispatcher:
    def __init__(self) -> None:
        self.p = ServerProgress(in_flight=4, rates=CompletionRateWindow(60.0, time.time() - 60))

    def progress(self, name: str) -> ServerProgress:
        return self.p


async def test_unstreamed_without_metrics_derives_the_timeout_from_the_speed(
        tmp_path: Path) -> None:
    d = Dispatcher()
    server = _server(tmp_path, d, DispatchSection(stream=False))
    r = server.ready.progress_reader.read()
    assert not r.token_signal
    # No speed measured yet: the request timeout.
    assert r.derived_timeout_s == DispatchSection().request_timeout_s
    # 4 streams made 200 tok/s over the window: 50 tok/s each; 1000 tokens take 20 s, x2.
    assert d.p.rates is not None
    d.p.rates.add(time.time(), 10, 200 * 60)
    d.p.completed = 10
    r = server.ready.progress_reader.read()
    assert r.derived_timeout_s is not None and abs(r.derived_timeout_s - 40.0) < 2.0
    # A hang stops the completions: the speed is kept, the timeout does not stretch.
    d.p.rates = CompletionRateWindow(60.0, time.time() - 60)
    r = server.ready.progress_reader.read()
    assert r.derived_timeout_s is not None and abs(r.derived_timeout_s - 40.0) < 2.0


async def test_streamed_is_a_token_signal(tmp_path: Path) -> None:
    d = Dispatcher()
    d.p.last_token_at = 12.5
    r = _server(tmp_path, d, DispatchSection(stream=True)).ready.progress_reader.read()
    assert r.token_signal and r.token_at == 12.5 and r.derived_timeout_s is None


async def test_a_reloaded_hang_timeout_applies_within_the_same_life() -> None:
    # A reload raises hang_timeout_s from 0.3 s to 60 s while the server is busy with no
    # token: the watchdog reads its settings at each tick, so the new limit holds at once
    # (it used to hold the section the life started with until the next restart).
    settings = {"s": SERVERS}

    def read() -> ProgressReading:
        return ProgressReading(in_flight=2, token_at=None, token_signal=True, completed=0)
    decision = Decision()
    async with anyio.create_task_group() as tg:
        async def watch() -> None:
            with decision.scope:
                await watch_progress(read, lambda: settings["s"], decision,
                                     HangRule(anyio.current_time()))
        tg.start_soon(watch)
        await anyio.sleep(0.1)
        settings["s"] = replace(SERVERS, hang_timeout_s=60.0)
        await anyio.sleep(1.5)                  # five of the old timeouts
        assert decision.outcome is None
        settings["s"] = SERVERS                 # and back down: it fires
        with anyio.fail_after(10):
            while decision.outcome is None:
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()


async def test_a_life_counts_its_answers_and_its_words_say_how_long_it_served(
        tmp_path: Path) -> None:
    """Ten seconds of tokens with answers done: its answers are counted (the failure's event
    says them); such lives served, so they never fill the unanswered count, and the
    brief-lives count says they served under 300 s and what they answered."""
    d = Dispatcher()
    d.p.answered = 7                    # the last life's answers are not this one's
    server = _server(tmp_path, d, DispatchSection(stream=True))
    server.ready.progress_reader.new_life(())
    rule = HangRule(started_at=0.0)
    d.p.last_token_at = 1.0
    rule.observe(server.ready.progress_reader.read(), 1.0, 600.0)
    d.p.answered = 10
    d.p.last_token_at = 11.0
    rule.observe(server.ready.progress_reader.read(), 11.0, 600.0)
    assert rule.life.answered == 3 and rule.life.span_s == 10.0
    assert not rule.life.served(300.0)
    policy = RestartPolicy(1, 10, max_failures=50, window_s=60, max_unserved=5,
                           served_after_s=300.0, max_brief=5)
    end = LifeEnd(rule.life.answered, rule.life.served(300.0))
    decisions = [policy.record_failure(float(i), end) for i in range(5)]
    assert decisions[-1].give_up and decisions[-1].unserved_in_row == 0
    assert decisions[-1].reason == ("5 lives in a row each failed within 300 s of serving, "
                                    "answering 15 in all")
