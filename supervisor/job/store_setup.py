"""Opening the job's state at start: recover what a killed daemon left in flight, then import
the prompts file (idempotent, skipped when this exact file was imported before)."""

from __future__ import annotations

import logging
import time
from typing import Callable

from state.store import Store
from supervisor.config import JobConfig

log = logging.getLogger("supervisor.job")

SETTING_IMPORTED = "imported_prompts"


class JobError(RuntimeError):
    """The job cannot start (no prompts, unreadable prompts file...)."""


def import_prompts(store: Store, config: JobConfig) -> None:
    """Import the prompts file unless this exact file (size and mtime) was imported before:
    re-reading a million lines at every restart is wasted minutes, and importing is
    idempotent anyway, so a changed file is simply imported again."""
    from supervisor.prompt_import import import_file

    path = config.path(config.job.prompts)
    try:
        st = path.stat()
    except FileNotFoundError:
        if store.counts().total:
            log.warning("prompts file %s is gone; continuing with the %d prompts imported",
                        path, store.counts().total)
            return
        raise JobError(f"job.prompts: {path}: no such file, and no prompts imported yet") from None
    fingerprint = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}:{config.job.partition}"
    if store.get_setting(SETTING_IMPORTED) == fingerprint:
        return
    summary = import_file(store, path, partition=config.job.partition)
    log.info("imported %s: %s", path, summary)
    if not store.counts().total:
        raise JobError(f"job.prompts: {path}: no usable prompts ({summary})")
    store.set_setting(SETTING_IMPORTED, fingerprint)


def open_job_store(config: JobConfig, *, before_open: Callable[[], None] | None = None,
                   after_open: Callable[[Store], None] | None = None) -> Store:
    """The store, ready to run on: nothing in flight, the prompts imported. The hooks run
    just before the DB file is opened and once it is ready (a node's state backups)."""
    path = config.path(config.job.state)
    path.parent.mkdir(parents=True, exist_ok=True)
    if before_open is not None:
        before_open()
    store = Store.open(path)
    try:
        recovered = store.recover_in_flight()
        if recovered:
            log.info("%d prompts were in flight when the last daemon stopped: pending again",
                     recovered)
            store.add_event("recovered_in_flight", "job", {"count": recovered},
                            "supervisor", time.time())
        import_prompts(store, config)
        if after_open is not None:
            after_open(store)
    except BaseException:
        store.close()
        raise
    return store
