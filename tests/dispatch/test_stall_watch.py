"""Stalls counted per server (stall_watch.py) and the progress watcher acting on the hang
they add up to (servers/watchers.py watch_progress), without processes."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest

from supervisor.config import ConfigError, ServersSection
from supervisor.dispatch.dispatch_snapshot import ServerProgress
from supervisor.dispatch.stall_watch import HANG_STALLS, HANG_WINDOW_S, StallWindow
from supervisor.servers.exit_classifier import Trigger
from supervisor.servers.hang_rule import HangRule, ProgressReading
from supervisor.servers.watchers import Decision, watch_progress
from tests.fixtures.dispatching import job_config


def test_three_stalls_within_the_window_make_a_hang_and_old_ones_expire() -> None:
    w = StallWindow()
    assert (HANG_STALLS, HANG_WINDOW_S) == (3, 300.0)
    assert w.stalled("gpu0", 0.0) is None
    assert w.stalled("gpu0", 100.0) is None
    assert w.stalled("gpu1", 150.0) is None          # another server's stall is its own
    assert w.stalled("gpu0", 301.0) is None          # the first one has left the window
    assert w.count("gpu0") == 2
    assert w.stalled("gpu0", 302.0) == "hang: 3 requests stalled within 300 s"
    w.reset("gpu0")
    assert w.count("gpu0") == 0 and w.count("gpu1") == 1


def test_a_window_needs_sensible_settings() -> None:
    with pytest.raises(ValueError, match=r"stalls must be >= 0 \(0: never\)"):
        StallWindow(-1, 60)
    with pytest.raises(ValueError, match="window_s > 0"):
        StallWindow(3, 0)


async def test_the_progress_watcher_restarts_a_server_the_dispatcher_found_hung() -> None:
    # Requests keep completing (each stall ends its request), so only the hook can tell.
    p = ServerProgress(in_flight=4)
    servers = replace(ServersSection(count=1, model_path="m"), hang_timeout_s=3600.0,
                      health_interval_s=0.02)

    def progress() -> ProgressReading:
        p.completed += 1
        return ProgressReading(in_flight=p.in_flight, token_at=anyio.current_time(),
                               token_signal=True, completed=p.completed, hung=p.hung)

    decision = Decision()
    async with anyio.create_task_group() as tg:
        with decision.scope:
            tg.start_soon(watch_progress, progress, lambda: servers, decision,
                          HangRule(anyio.current_time()))
            await anyio.sleep(0.1)
            assert decision.outcome is None              # busy and completing: fine
            p.hung = "hang: 3 requests stalled within 300 s"
            with anyio.fail_after(10):
                await anyio.sleep_forever()
    assert decision.outcome is not None
    assert decision.outcome.trigger is Trigger.PROGRESS
    assert decision.outcome.detail == "hang: 3 requests stalled within 300 s"


@pytest.mark.parametrize("values, message", [
    ({"stall_s": 0}, "dispatch.stall_s: must be > 0"),
    ({"stall_s": -5.0}, "dispatch.stall_s: must be > 0"),
    ({"stream": "yes"}, "dispatch.stream"),
])
def test_stream_settings_are_checked(tmp_path, values, message) -> None:
    with pytest.raises(ConfigError, match=message):
        job_config(tmp_path, dispatch=values)


def test_streaming_is_on_by_default_with_a_two_minute_stall(tmp_path) -> None:
    d = job_config(tmp_path).dispatch
    assert d.stream is True and d.stall_s == 120.0


def test_the_hang_rule_is_configurable_and_zero_turns_it_off() -> None:
    from supervisor.config import parse_config

    base = {"servers": {"count": 1, "model_path": "m", "flags": {"reasoning-parser": "qwen3"}}}
    cfg = parse_config({**base, "dispatch": {"stall_hang_count": 2, "stall_hang_window_s": 60}})
    w = StallWindow(cfg.dispatch.stall_hang_count, cfg.dispatch.stall_hang_window_s)
    assert w.stalled("gpu0", 0.0) is None
    assert w.stalled("gpu0", 59.0) == "hang: 2 requests stalled within 60 s"
    off = StallWindow(0, 60)
    assert all(off.stalled("gpu0", float(t)) is None for t in range(50))
    with pytest.raises(ConfigError, match="dispatch.stall_hang_count: must be >= 0"):
        parse_config({**base, "dispatch": {"stall_hang_count": -1}})
    with pytest.raises(ConfigError, match="dispatch.stall_hang_window_s"):
        parse_config({**base, "dispatch": {"stall_hang_window_s": 0}})
