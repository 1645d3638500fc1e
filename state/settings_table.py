"""The `settings` table: live settings the daemon keeps across restarts (max tokens, pauses).
Its keys are named in one place, state/settings_keys.py."""

from __future__ import annotations

from state.connection import StoreConnection
from state.settings_keys import Setting


class SettingsTable(StoreConnection):
    """Key/value settings."""

    def get_setting(self, key: Setting, default: str | None = None) -> str | None:
        rows = self._read("SELECT value FROM settings WHERE key = ?", (key,))
        return rows[0][0] if rows else default

    def set_setting(self, key: Setting, value: str) -> None:
        with self._tx() as conn:
            conn.execute("INSERT INTO settings (key, value) VALUES (?, ?) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))
