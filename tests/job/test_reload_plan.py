"""Sorting a reloaded config's changes: live, rolling, or refused naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.config import load_config, parse_config
from supervisor.job.reload_plan import ReloadRefused, diff, load_for_reload, plan_reload

BASE = {"servers": {"count": 2, "model_path": "m",
                    "flags": {"max-running-requests": 8, "context-length": 8192,
                              "reasoning-parser": "qwen3"}}}


def cfg(**sections):
    data = {k: dict(v) for k, v in BASE.items()}
    for name, values in sections.items():
        merged = dict(data.get(name, {}))
        for k, v in values.items():
            if k == "flags":
                merged["flags"] = {**data["servers"]["flags"], **v}
            else:
                merged[k] = v
        data[name] = merged
    return parse_config(data)


def test_same_config_is_no_change():
    assert diff(cfg(), cfg()) == []
    assert plan_reload(cfg(), cfg()).summary() == "no changes"


def test_live_keys_are_applied_live():
    plan = plan_reload(cfg(), cfg(generation={"max_tokens": 2048, "temperature": 0.7},
                                  quality={"max_bad_rate": 0.3},
                                  dispatch={"max_attempts": 5, "stop_grace_s": 10},
                                  uploads={"concurrency": 8},
                                  servers={"hang_timeout_s": 60}))
    assert [c.key for c in plan.live] == [
        "generation.max_tokens", "generation.temperature", "servers.hang_timeout_s",
        "dispatch.max_attempts", "dispatch.stop_grace_s", "quality.max_bad_rate",
        "uploads.concurrency"]
    assert plan.rolling == ()
    assert plan.value("generation.max_tokens") == 2048
    assert "generation.max_tokens 4096 -> 2048" in plan.summary()


def test_flag_changes_roll_and_removed_flags_are_none():
    old = cfg(servers={"flags": {"mem-fraction-static": 0.9}})
    new = parse_config({"servers": {"count": 2, "model_path": "m", "flags": {
        "max-running-requests": 16, "context-length": 8192, "enable-metrics": True,
        "reasoning-parser": "qwen3"}}})
    plan = plan_reload(old, new)
    assert plan.live == ()
    assert plan.flag_delta() == {"max-running-requests": 16, "mem-fraction-static": None,
                                 "enable-metrics": True}


@pytest.mark.parametrize("section, key, value", [
    ("job", "state", "other.db"), ("job", "output", "s3://b/p/"), ("job", "partition", "1/4"),
    ("servers", "count", 3), ("servers", "model_path", "other"), ("control", "socket", "/x"),
    ("uploads", "endpoint_url", "http://127.0.0.1:9"),
])
def test_restart_only_keys_refuse_the_whole_reload_naming_the_key(section, key, value):
    new = cfg(**{section: {key: value}}, generation={"max_tokens": 100})
    with pytest.raises(ReloadRefused) as err:
        plan_reload(cfg(), new)
    assert str(err.value).startswith(f"{section}.{key}: only changes with a restart")
    assert "generation" not in str(err.value)


def test_max_tokens_at_the_context_length_is_refused_before_anything_applies():
    # Such a config is refused when it is loaded (supervisor/config/), so a reload
    # never gets to apply it.
    with pytest.raises(ReloadRefused, match="generation.max_tokens: 8192 is at or past the "
                                            "servers' context-length 8192"):
        load_for_reload(lambda: cfg(generation={"max_tokens": 8192}),
                        cfg(generation={"max_tokens": 100}))


def test_a_bad_file_is_refused_with_one_line(tmp_path: Path):
    path = tmp_path / "job.toml"
    path.write_text('[servers]\ncount = 2\nmodel_path = "m"\n[dispatch]\nmax_atempts = 3\n')
    with pytest.raises(ReloadRefused) as err:
        load_for_reload(lambda: load_config(path), cfg())
    assert str(err.value).startswith("invalid config: dispatch.max_atempts: unknown key")
    path.write_text("[servers\n")
    with pytest.raises(ReloadRefused, match="not valid TOML"):
        load_for_reload(lambda: load_config(path), cfg())


def test_the_watchdog_keys_apply_live():
    from supervisor.job.reload_plan import kind_of
    assert [kind_of(k) for k in ("dispatch.wait_s", "servers.max_unserved_failures",
                                 "servers.served_after_s", "servers.hang_timeout_s")] == \
        ["live"] * 4
