"""The state DB for a command that writes it with no daemon running (import, requeue,
rebuild-state): the job lock taken first, so nothing writes beside a running daemon (the DB's
only writer), then the DB opened and checked. Every way that fails is one `OfflineRefused`
line, the same for every such command."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from state.checked_open import StateDBError, open_checked
from state.job_lock import JobLock, JobLocked
from state.store import Store


class OfflineRefused(RuntimeError):
    """Why the command could not have the DB, in one line naming the problem."""


@contextmanager
def offline_store(state: str | Path, *, create: bool = False,
                  when_locked: str = "") -> Iterator[Store]:
    """`create`: a missing DB (and its directory) is made. `when_locked` is added to the
    message when a daemon holds the job (what to do instead). An OSError inside the block
    (reading the prompts file, a full disk) is refused the same way."""
    state = Path(state)
    try:
        if create:
            state.parent.mkdir(parents=True, exist_ok=True)
        with JobLock(state):
            store = open_checked(state, create=create)
            try:
                yield store
            finally:
                store.close_for_readers()     # readable without write access to its dir
    except JobLocked as exc:
        raise OfflineRefused(f"{exc}{when_locked}") from None
    except StateDBError as exc:
        raise OfflineRefused(str(exc)) from None
    except OSError as exc:
        raise OfflineRefused(f"{exc.filename or state}: {exc.strerror}") from None
