"""The flags a search kept: `check` prints the `[servers.flags]` lines from the state DB,
and a daemon's live settings take them at start."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from state.async_store import AsyncStore
from state.store import Store
from supervisor.commands import check
from supervisor.config import JobConfig, load_config
from supervisor.config.live_settings import LiveSettings
from supervisor.tune.kept_flags import flag_lines, restore_kept_flags
from tests.commands.test_check import CONFIG, HELP, _write


def test_flag_lines_are_toml_the_config_reads() -> None:
    lines = flag_lines({"max-running-requests": 64, "mem-fraction-static": 0.93,
                        "enable-metrics": True, "odd name": "a\"b"})
    assert lines[0] == "[servers.flags]"
    assert tomllib.loads("\n".join(lines))["servers"]["flags"] == {
        "max-running-requests": 64, "mem-fraction-static": 0.93, "enable-metrics": True,
        "odd name": "a\"b"}


def test_check_prints_the_lines_of_the_flags_kept(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = _write(tmp_path, CONFIG)
    rc = check.main(["--config", config], help_provider=lambda cmd: HELP)
    assert rc == 0 and "the tuner keeps" not in capsys.readouterr().out   # no state DB yet
    cfg = load_config(config)
    kept = {**cfg.servers.flags, "max-running-requests": 128}
    with Store.open(cfg.path(cfg.job.state)) as store:
        store.set_tune_flags("gpu0", kept, 1.0, 3)
        store.set_tune_flags("gpu1", kept, 2.0, None)
    rc = check.main(["--config", config], help_provider=lambda cmd: HELP)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "the tuner keeps these flags for gpu0, gpu1 (state DB)" in out
    assert "[servers.flags]\nenable-metrics = true\nmax-mamba-cache-size = 200\n" \
           "max-running-requests = 128\n" in out


def _kept_db(tmp_path: Path) -> tuple[JobConfig, Store]:
    cfg = load_config(_write(tmp_path, CONFIG))
    store = Store.open(cfg.path(cfg.job.state))
    store.set_tune_flags("gpu1", {**cfg.servers.flags, "max-running-requests": 128,
                                  "chunked-prefill-size": 4096}, 1.0, 1)
    store.set_tune_flags("gpu7", {"max-running-requests": 9}, 1.0, 1)   # not this job's
    return cfg, store


async def test_a_new_daemon_starts_with_the_flags_kept(tmp_path: Path) -> None:
    cfg, store = await anyio.to_thread.run_sync(_kept_db, tmp_path)
    live = LiveSettings(cfg, ["gpu0", "gpu1"])
    astore = AsyncStore(store)
    try:
        applied = await restore_kept_flags(live, astore, ["gpu0", "gpu1"])
    finally:
        await astore.close()
        await anyio.to_thread.run_sync(store.close)
    assert list(applied) == ["gpu1"]
    assert live.server("gpu1").flags["max-running-requests"] == 128
    assert live.server("gpu1").flags["chunked-prefill-size"] == 4096
    assert live.server("gpu0").flags["max-running-requests"] == 64


def test_a_reload_changes_the_tuners_knobs_live_enabled_included(tmp_path: Path) -> None:
    from supervisor.job.reload_plan import plan_reload
    cfg = load_config(_write(tmp_path, CONFIG))
    new = replace(cfg, tune=replace(cfg.tune, max_trials=3, space={"max-running-requests": [96]}))
    plan = plan_reload(cfg, new)
    assert [c.key for c in plan.live] == ["tune.max_trials", "tune.space.max-running-requests"]
    # Started or stopped by the reload itself (tests/job/test_reload_running_job.py).
    plan = plan_reload(cfg, replace(cfg, tune=replace(cfg.tune, enabled=True)))
    assert [c.key for c in plan.live] == ["tune.enabled"] and not plan.rolling
