"""The job's state: one SQLite file, one connection, every query the daemon runs.

Synchronous and thread-safe: one connection (check_same_thread=False) behind a lock, so calls
from worker threads (AsyncStore, the shard writer's thread) are serialised. Every method that
changes state is one transaction (BEGIN IMMEDIATE ... COMMIT); a process killed at any point
leaves the DB as it was before or after that transaction, never in between.

Durability: WAL with synchronous=NORMAL. A commit is safe from a killed *process* the moment
it returns (the WAL is in the OS page cache); only a power cut or kernel crash can lose the last
few commits, and SQLite rolls them back cleanly. For claims and results that is harmless: a lost
result is simply generated again. It is not harmless once a result has left the DB (a shard
file, an upload): so `assign_shards`, the step just before any byte is written outside the DB,
commits with synchronous=FULL, which fsyncs the WAL and with it every earlier commit. Anything
that can appear in an output file is therefore durable first. A fsync per result would cost
throughput for no gain in correctness.
"""

from __future__ import annotations

from state.events_table import EventsTable
from state.prompt_rework import PromptRework
from state.prompts_table import PromptsTable
from state.server_processes_table import ServerProcessesTable
from state.settings_table import SettingsTable
from state.shard_audit import ShardAudit
from state.shards_table import ShardsTable
from state.status_reads import StatusReads
from state.token_ids_table import TokenIdsTable
from state.tune_table import TuneTable
from state.waste_table import WasteTable


class Store(StatusReads, PromptsTable, ShardsTable, EventsTable, SettingsTable,
            ServerProcessesTable, PromptRework, ShardAudit, WasteTable, TokenIdsTable,
            TuneTable):
    """Every query of the daemon, one table family per base class, over one connection
    (state/connection.py): `store.claim(...)`, `AsyncStore.call(Store.claim, ...)`."""
