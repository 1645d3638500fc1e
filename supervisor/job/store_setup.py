"""Opening the job's state at start: recover what a killed daemon left in flight, then import
the prompts file (idempotent, skipped when this exact file was imported before)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from state.records import InFlightClaim
from state.settings_keys import Setting
from state.store import Store
from supervisor.config import JobConfig
from supervisor.contract.event_kinds import EventKind

log = logging.getLogger("supervisor.job")


class JobError(RuntimeError):
    """The job cannot start (no prompts, unreadable prompts file...)."""


def import_prompts(store: Store, config: JobConfig) -> None:
    """Import the prompts file unless this exact file (size and mtime) was imported before:
    re-reading a million lines at every restart is wasted minutes, and importing is
    idempotent anyway, so a changed file is simply imported again."""
    from supervisor.prompts.prompt_import import import_file, prompts_file_problem

    path = config.path(config.job.prompts)
    problem = prompts_file_problem(path)
    if problem and "no such file" not in problem:
        raise JobError(f"job.prompts: {problem}")
    try:
        st = path.stat()
    except FileNotFoundError:
        if store.counts().total:
            log.warning("prompts file %s is gone; continuing with the %d prompts imported",
                        path, store.counts().total)
            return
        raise JobError(f"job.prompts: {path}: no such file, and no prompts imported yet") from None
    fingerprint = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}:{config.job.partition}"
    if store.get_setting(Setting.IMPORTED_PROMPTS) == fingerprint:
        return
    summary = import_file(store, path, partition=config.job.partition)
    log.info("imported %s: %s", path, summary)
    for lineno, reason in summary.errors[:10]:
        log.warning("%s:%d: %s", path, lineno, reason)
    if summary.rejected > 10:
        more = summary.rejected - 10
        log.warning("%s: %d more refused line%s (all in the state DB's import_refusals)",
                    path, more, "" if more == 1 else "s")
    for warning in (summary.dropped_warning(), summary.changed_warning()):
        if warning:
            log.warning("%s: %s", path, warning)
    if not store.counts().total:
        raise JobError(f"job.prompts: {path}: no usable prompts ({summary})")
    store.set_setting(Setting.IMPORTED_PROMPTS, fingerprint)


def open_job_store(config: JobConfig, *, before_open: Callable[[], None] | None = None,
                   after_open: Callable[[Store], None] | None = None,
                   check_output: Callable[[Store], None] | None = None,
                   left_in_flight: Callable[[list[InFlightClaim]], None] | None = None,
                   ) -> Store:
    """The store, ready to run on: checked (quick_check), nothing in flight, the output
    checked against it, the prompts imported. `before_open`/`after_open` run just before the
    DB file is opened and once it is open (a node's state backups: a restore, then the shards
    uploaded since the backup taken back), `check_output` after them and before the import,
    so a start refused over existing output leaves a new DB as empty as it found it.
    First of all, the directory shards go into must be usable (output_paths.py): a fault
    there is refused before the DB is touched or a prompt read."""
    from state.checked_open import StateDBError, open_checked
    from supervisor.job.output_paths import output_dir_problem

    problem = output_dir_problem(config)
    if problem is not None:
        raise JobError(problem)
    path = config.path(config.job.state)
    path.parent.mkdir(parents=True, exist_ok=True)
    if before_open is not None:
        before_open()
    try:
        store = open_checked(path)
    except StateDBError as exc:
        raise JobError(f"job.state: {exc}") from None
    try:
        if left_in_flight is not None:
            # Before they are pending again: which requests the last daemon left on its
            # servers (a server adopted by this one gets them aborted by id).
            left_in_flight(store.in_flight_claims())
        recovered = store.recover_in_flight()
        if recovered:
            log.info("%d prompts were in flight when the last daemon stopped: pending again",
                     recovered)
            store.add_event(EventKind.RECOVERED_IN_FLIGHT, "job", {"count": recovered},
                            "supervisor", time.time())
        if after_open is not None:
            after_open(store)
        if check_output is not None:
            check_output(store)
        import_prompts(store, config)
    except BaseException:
        store.close_for_readers()       # a refused start leaves it readable, like a stop
        raise
    return store
