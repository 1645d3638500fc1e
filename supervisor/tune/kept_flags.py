"""The flags a search left in force, across daemon restarts: read from the state DB's
`tune_flags` at start and applied to each server's live section before the fleet launches (or
adopts) it, so a restarted daemon runs the winner, not the config's flags it replaced. Also
the `[servers.flags]` lines an operator puts in the config to make them the job's own."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from typing import Any

from state.async_store import AsyncStore
from state.store import Store
from supervisor.config import ConfigError, JobConfig
from supervisor.config.live_settings import LiveSettings
from supervisor.config.toml_text import toml_value
from supervisor.tune.search import flags_change

log = logging.getLogger("supervisor.tune")


def flag_lines(flags: Mapping[str, Any]) -> list[str]:
    """The `[servers.flags]` TOML lines for a flag set."""
    def key(k: str) -> str:
        return k if k.replace("-", "").replace("_", "").isalnum() else f'"{k}"'

    return ["[servers.flags]"] + [f"{key(k)} = {toml_value(v)}" for k, v in sorted(flags.items())]


async def restore_kept_flags(live: LiveSettings, astore: AsyncStore,
                             names: list[str]) -> dict[str, dict[str, Any]]:
    """Applies each own server's kept flags; returns those applied. A kept set the config
    no longer allows (a context length under the live max tokens) is skipped, said in the log."""
    kept = await astore.call(Store.tune_flags)
    applied: dict[str, dict[str, Any]] = {}
    for name, flags in kept.items():
        if name not in names:
            continue
        change = flags_change(dict(live.server(name).flags), flags)
        if not change:
            continue
        try:
            section = live.retuned(change, [name])[name]
        except ConfigError as exc:
            log.warning("tune: %s: the flags a search kept are not applied: %s", name, exc)
            continue
        live.apply_server(name, section)
        applied[name] = flags
        log.info("tune: %s starts with the flags a search kept (the config says otherwise); "
                 "to make them the job's own:\n%s", name, "\n".join(flag_lines(flags)))
    return applied


def kept_flag_lines(cfg: JobConfig) -> list[str]:
    """What `check` says of the flags a search kept in the job's state DB: the
    `[servers.flags]` lines to put in the config (one set when every server kept the same);
    nothing when there is no DB, it predates the tuner, or no search kept anything."""
    path = cfg.path(cfg.job.state)
    if not path.is_file():
        return []
    try:
        store = Store.open_readonly(path)
    except (sqlite3.Error, RuntimeError):
        return []
    try:
        kept = store.tune_flags()
    except sqlite3.Error:         # a DB from before schema 13: no tuner there
        return []
    finally:
        store.close()
    if not kept:
        return []
    sets = {tuple(sorted(f.items(), key=lambda kv: kv[0])) for f in kept.values()}
    if len(sets) == 1:
        flags = next(iter(kept.values()))
        return [f"the tuner keeps these flags for {', '.join(sorted(kept))} (state DB); to "
                f"make them the config's:", *flag_lines(flags)]
    lines = []
    for name, flags in sorted(kept.items()):
        lines += [f"the tuner keeps these flags for {name} (state DB):", *flag_lines(flags)]
    return lines
