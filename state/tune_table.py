"""The tuner's tables (schema version 13): `tune_trials`, one row per candidate a canary tried,
and `tune_flags`, the flags a search left in force per server, read back at the next start."""

from __future__ import annotations

import json
from typing import Any

from state.connection import StoreConnection, dumps
from supervisor.contract.server_status import Flag, flag_value
from supervisor.contract.tuning import Trial, TrialVerdict

_COLUMNS = ("id, server, changed, flags, started_at, ended_at, window_s, answers, "
            "canary_tok_s, controls_tok_s, ratio_before, ratio_after, gain, noise, verdict, "
            "reason")
# What a trial's end may set (the row's figures and verdict).
_ENDING = ("ended_at", "window_s", "answers", "canary_tok_s", "controls_tok_s",
           "ratio_before", "ratio_after", "gain", "noise", "verdict", "reason")


def _trial(row: tuple) -> Trial:
    flags = tuple(Flag(k, flag_value(v)) for k, v in json.loads(row[3]).items())
    verdict = None if row[14] is None else TrialVerdict(row[14])
    return Trial(id=row[0], server=row[1], changed=row[2], flags=flags, started_at=row[4],
                 ended_at=row[5], phase="ended" if row[5] is not None else "restarting",
                 window_s=row[6], answers=row[7] or 0, canary_tok_s=row[8],
                 controls_tok_s=row[9], ratio_before=row[10], ratio_after=row[11],
                 gain=row[12], noise=row[13], verdict=verdict, reason=row[15])


class TuneTable(StoreConnection):
    """Trials and the flags in force; the tuner (supervisor/tune/tuner.py) writes both."""

    def add_tune_trial(self, server: str, changed: str, flags: dict[str, Any],
                       started_at: float) -> int:
        with self._tx() as conn:
            cur = conn.execute("INSERT INTO tune_trials (server, changed, flags, started_at) "
                               "VALUES (?, ?, ?, ?)", (server, changed, dumps(flags),
                                                       started_at))
            return int(cur.lastrowid or 0)

    def end_tune_trial(self, trial_id: int, **figures: Any) -> None:
        unknown = set(figures) - set(_ENDING)
        if unknown:
            raise ValueError(f"end_tune_trial: unknown columns {sorted(unknown)}")
        names = sorted(figures)
        values = [str(figures[n]) if n == "verdict" and figures[n] is not None else figures[n]
                  for n in names]
        with self._tx() as conn:
            conn.execute(f"UPDATE tune_trials SET {', '.join(f'{n} = ?' for n in names)} "
                         f"WHERE id = ?", (*values, trial_id))

    def tune_trials(self, last: int = 1000) -> list[Trial]:
        rows = self._read(f"SELECT {_COLUMNS} FROM tune_trials ORDER BY id DESC LIMIT ?",
                          (last,))
        return [_trial(r) for r in reversed(rows)]

    def set_tune_flags(self, server: str, flags: dict[str, Any], at: float,
                       trial_id: int | None) -> None:
        with self._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO tune_flags (server, flags, set_at, trial_id) "
                         "VALUES (?, ?, ?, ?)", (server, dumps(flags), at, trial_id))

    def tune_flags(self) -> dict[str, dict[str, Any]]:
        return {r[0]: json.loads(r[1])
                for r in self._read("SELECT server, flags FROM tune_flags ORDER BY server")}

    def longest_prompts(self, n: int) -> list[list[dict[str, Any]]]:
        """The `messages` of the job's n longest prompts (by their JSON's length): the
        tuner's long-batch probe. A scan of every row: read once per search."""
        rows = self._read("SELECT messages FROM prompts ORDER BY length(messages) DESC "
                          "LIMIT ?", (n,))
        return [json.loads(r[0]) for r in rows]
