"""`dflash-supervisor status --state DB`: where a job stands, read from its state DB.

Works whether or not the daemon is running (SQLite's WAL lets a reader in beside the
writer); the live rates need the daemon and come from its control socket instead. It only
reads (state/checked_open.py open_for_reading): a file that is not a state DB is named and
left as it was, a DB of an older schema is read without being migrated, and a stopped job's
DB is read by a user who may read the file but not write its directory. Every figure comes
from a counter the daemon keeps (status_counts, truncation_counts, token_ledger,
continued_totals, the partial index of answers marked to continue), so it
costs the same at 3K prompts as at 900K.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor.client.text import clipped

if TYPE_CHECKING:
    from state.continuation_reads import ContinuationTotals
    from state.store import Store
    from state.waste_table import TokenLedger


def open_db(state: str | Path) -> Store:
    """The state DB, read-only, or StateDBError naming the problem in one line."""
    from state.checked_open import open_for_reading
    return open_for_reading(Path(state))


def main(state: str, events: int = 10, header: str | None = None) -> int:
    """`header` is printed once the DB has opened: a file that is not a state DB gets its
    one-line error alone, not a heading that promises a status."""
    from state.checked_open import StateDBError

    try:
        store = open_db(state)
    except StateDBError as exc:
        print(f"dflash-supervisor: {exc}", file=sys.stderr)
        return 2
    try:
        if header is not None:
            print(header, flush=True)
        _print_summary(store, events)
    except sqlite3.Error as exc:
        # A damaged page where status reads (it does not check the whole file: see
        # state/checked_open.py), or a DB changed under it: one line, never a traceback.
        from state.checked_open import read_error
        print(f"dflash-supervisor: {read_error(store.path, exc)}", file=sys.stderr)
        return 2
    finally:
        store.close()
    return 0


def _print_summary(store: Store, events: int) -> None:
    c = store.counts()
    pct = 100.0 * c.done / c.total if c.total else 0.0
    print(f"prompts  {c.total}: {c.done} done ({pct:.1f}%), {c.pending} pending, "
          f"{c.in_flight} in flight, {c.failed} failed")
    t = store.truncation_counts()
    if t.truncated:
        print(f"truncated {t.truncated}: {t.long} long, {t.looping} looping "
              "(requeue truncated leaves the looping ones); "
              f"{t.in_thinking} cut off inside the thinking (no answer)")
    ledger = _ledger(store)
    continued = _continued(store)
    if ledger is not None and ledger.generated_tokens:
        print(f"waste    {_waste_text(ledger, continued)}")
    if continued is not None and continued.continuing:
        print(f"continue {continued.continuing} truncated answers marked to be continued from "
              "their stored tokens (the daemon sends them before fresh prompts)")
    joules = _joules(store)
    if joules:
        print(f"energy   {joules / 3.6e6:.2f} kWh on the job's GPUs so far")
    (shards, nbytes), (up_shards, up_bytes) = store.upload_totals()
    print(f"shards   {up_shards} uploaded ({up_bytes / 1e6:.1f} MB), "
          f"{shards} waiting ({nbytes / 1e6:.1f} MB)")
    failed = store.last_upload_error()
    if failed is not None:
        key, attempts, error = failed
        print(f"uploads  {key} waiting after {attempts} failed uploads: {clipped(error, 200)}")
    for e in store.recent_events(events):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e.time))
        print(f"{when}  {e.kind:<18} {e.subject:<10} {e.actor:<12} "
              f"{clipped(json.dumps(e.detail, ensure_ascii=False), 160)}")


def _ledger(store: Store) -> TokenLedger | None:
    """The waste ledger; None for a DB from before it (schema 6), read as it stands."""
    return store.token_ledger() if store.schema_version >= 6 else None


def _continued(store: Store) -> ContinuationTotals | None:
    """Continuations finished and marked; None for a DB from before them (schema 11)."""
    return store.continuation_totals() if store.schema_version >= 12 else None


def _waste_text(ledger: TokenLedger, continued: ContinuationTotals | None) -> str:
    """The waste ledger as the live status says it (supervisor/client/text.py waste_line)."""
    from supervisor.client.text import waste_line
    from supervisor.contract.status import Waste, WasteCount
    return waste_line(Waste(
        kept_tokens=ledger.kept_tokens, wasted_tokens=ledger.wasted_tokens,
        goodput=ledger.goodput,
        causes=tuple(WasteCount(str(w.cause), w.requests, w.tokens) for w in ledger.wasted),
        continued_answers=continued.continued_answers if continued else 0,
        continued_tokens=continued.continued_tokens if continued else 0))


def _joules(store: Store) -> float:
    """What the daemon carried in the DB (settings energy_joules); 0 when none."""
    from state.settings_keys import Setting
    try:
        return float(store.get_setting(Setting.ENERGY_JOULES) or 0.0)
    except ValueError:
        return 0.0


def _waste_json(ledger: TokenLedger | None) -> dict[str, object] | None:
    if ledger is None:
        return None
    return {"kept_tokens": ledger.kept_tokens, "wasted_tokens": ledger.wasted_tokens,
            "goodput": ledger.goodput,
            "causes": {str(w.cause): {"requests": w.requests, "tokens": w.tokens}
                       for w in ledger.wasted}}


def _continued_json(t: ContinuationTotals | None) -> dict[str, int] | None:
    return None if t is None else dataclasses.asdict(t)


def summary_json(state: str) -> dict[str, object]:
    """The DB's figures for `status --json` when no daemon answers; StateDBError when the
    DB cannot be read (missing, not a state DB...)."""
    from state.checked_open import StateDBError, read_error

    store = open_db(state)
    try:
        return _summary(store)
    except sqlite3.Error as exc:
        raise StateDBError(read_error(store.path, exc)) from None
    finally:
        store.close()


def _summary(store: Store) -> dict[str, object]:
    c = store.counts()
    (shards, nbytes), (up_shards, up_bytes) = store.upload_totals()
    return {"job": {"total": c.total, "done": c.done, "pending": c.pending,
                    "in_flight": c.in_flight, "failed": c.failed},
            "uploads": {"uploaded_shards": up_shards, "uploaded_bytes": up_bytes,
                        "backlog_shards": shards, "backlog_bytes": nbytes},
            "truncated": dataclasses.asdict(store.truncation_counts()),
            "waste": _waste_json(_ledger(store)),
            "continued": _continued_json(_continued(store)),
            "energy_kwh": _joules(store) / 3.6e6}
