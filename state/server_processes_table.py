"""The `server_processes` table: process groups the daemon started, until known stopped."""

from __future__ import annotations

import json

from state.connection import StoreConnection, dumps
from state.records import ServerProcess


class ServerProcessesTable(StoreConnection):
    """Record, forget and list server process groups (orphan cleanup reads them)."""

    def record_server_process(self, name: str, pid: int, pgid: int, argv: list[str],
                              started_at: float) -> None:
        with self._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO server_processes (name, pid, pgid, argv, "
                         "started_at) VALUES (?, ?, ?, ?, ?)",
                         (name, pid, pgid, dumps(list(argv)), started_at))

    def forget_server_process(self, name: str) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM server_processes WHERE name = ?", (name,))

    def server_processes(self) -> list[ServerProcess]:
        rows = self._read("SELECT name, pid, pgid, argv, started_at FROM server_processes "
                          "ORDER BY name")
        return [ServerProcess(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]
