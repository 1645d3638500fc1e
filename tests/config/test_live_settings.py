"""The live settings (supervisor/config/live_settings.py): one owner of what is live, and the
checks across settings that only it can make, whichever setting changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.config import ConfigError
from supervisor.config.live_settings import LiveSettings
from tests.fixtures.dispatching import job_config


def _live(tmp_path: Path, context: int | None = 32768, max_tokens: int = 4096) -> LiveSettings:
    flags = {"context-length": context} if context is not None else {}
    return LiveSettings(job_config(tmp_path, generation={"max_tokens": max_tokens},
                                   servers={"count": 2, "flags": flags}), ["gpu0", "gpu1"])


def test_a_retune_of_every_server_bounds_max_tokens(tmp_path: Path) -> None:
    live = _live(tmp_path)
    assert live.set_max_tokens(20000) == 4096          # below 32768
    live.set_max_tokens(8192)
    sections = live.retuned({"context-length": 16384}, ["gpu0", "gpu1"])
    live.retune_all({"context-length": 16384})
    for name, section in sections.items():
        live.apply_server(name, section)
    assert live.context_length == 16384
    with pytest.raises(ValueError, match=r"max_tokens 20000 is not below the servers' context "
                                         r"length \(16384\)"):
        live.set_max_tokens(20000)
    assert live.max_tokens == 8192


def test_one_server_retuned_alone_bounds_max_tokens_too(tmp_path: Path) -> None:
    live = _live(tmp_path)
    live.apply_server("gpu1", live.retuned({"context-length": 8192}, ["gpu1"])["gpu1"])
    assert live.server("gpu0").context_length == 32768
    assert live.context_length == 8192
    with pytest.raises(ValueError, match="8192"):
        live.set_max_tokens(10000)


def test_a_retune_below_the_live_max_tokens_is_refused(tmp_path: Path) -> None:
    live = _live(tmp_path)
    live.set_max_tokens(12000)
    with pytest.raises(ConfigError, match=r"context-length 8192 is not above the live max "
                                          r"tokens \(12000\)"):
        live.retuned({"context-length": 8192}, ["gpu0"])
    with pytest.raises(ConfigError, match="live max tokens"):
        live.retune_all({"context-length": 8192})
    assert live.context_length == 32768


def test_a_reload_is_checked_against_the_live_max_tokens(tmp_path: Path) -> None:
    live = _live(tmp_path)
    live.set_max_tokens(12000)
    lower = job_config(tmp_path, generation={"max_tokens": 4096},
                       servers={"count": 2, "flags": {"context-length": 8192}})
    with pytest.raises(ConfigError, match=r"context-length 8192 is not above the live max "
                                          r"tokens \(12000\)"):
        live.check_reload(lower, None)
    live.check_reload(lower, 4096)       # the same reload lowering max tokens too is fine


def test_a_reload_keeps_each_servers_own_flags_and_tells_subscribers(tmp_path: Path) -> None:
    live = _live(tmp_path)
    live.apply_server("gpu1", live.retuned({"mem-fraction-static": 0.8}, ["gpu1"])["gpu1"])
    seen: list[object] = []
    live.subscribe(seen.append)
    new = job_config(tmp_path, servers={"count": 2, "health_interval_s": 7.0,
                                        "flags": {"context-length": 32768}})
    live.reload(new, {"health_interval_s": 7.0})
    assert seen == [new] and live.config is new
    assert live.server("gpu1").flags["mem-fraction-static"] == 0.8
    assert live.server("gpu1").health_interval_s == 7.0
    assert "mem-fraction-static" not in live.server("gpu0").flags


def test_nonsense_max_tokens_is_refused(tmp_path: Path) -> None:
    live = _live(tmp_path, context=None)
    for bad in (0, -5, True, 1.5, "100"):
        with pytest.raises(ValueError, match="max_tokens must be an integer >= 1"):
            live.set_max_tokens(bad)
    assert live.set_max_tokens(10**6) == 4096       # no context length set: no bound
