"""The job's side of state backups: who this node is, the restore before the DB opens, what
is recorded after, and the backup task.

Backups are on for a node of a many-node job (`job.partition` set) unless `[backup] enabled`
says otherwise. The prompt file's digest is this node's identity: a restore and every
sibling's backup are checked against it, so two nodes of one job never split different files.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from state.settings_keys import Setting
from state.store import Store
from supervisor.config import JobConfig
from supervisor.config.live_settings import LiveSettings
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.pause_sources import PauseSource
from supervisor.state_backup.backup import StateBackup
from supervisor.state_backup.manifest import BackupManifest
from supervisor.state_backup.restore import (
    NodeIdentity,
    RestoreRefused,
    adopt_uploaded,
    check_siblings,
    restore_if_missing,
)
from supervisor.uploads.file_digest import file_sha256
from supervisor.uploads.local_sink import LocalDirSink
from supervisor.uploads.output_reader import output_reader
from supervisor.uploads.s3_client import S3Location
from supervisor.uploads.s3_sink import S3Sink
from supervisor.uploads.sink import Sink, UploadError

log = logging.getLogger("supervisor.backup")


class BackupUnreachable(RuntimeError):
    """The output could not be read at start (a retry later may work)."""


class Pausing(Protocol):
    """What a backup that finds the prompt file changed asks of the dispatcher."""

    async def pause(self, key: PauseSource, reason: str, actor: str) -> None: ...


class NodeState:
    def __init__(self, live: LiveSettings, me: NodeIdentity) -> None:
        # The job's live settings (config/live_settings.py), read where needed: what this
        # reads (the state and output paths, the backup interval) is restart-only today,
        # but no copy can fall behind a reload that makes one of them live.
        self.live = live
        config = live.config
        self.me = me
        self.db_path = config.path(config.job.state)
        self.reader = output_reader(config.job.output, config.uploads, config.base_dir)
        self.restored: BackupManifest | None = None

    @property
    def config(self) -> JobConfig:
        return self.live.config

    @classmethod
    def prepare(cls, live: LiveSettings) -> NodeState | None:
        config = live.config
        if not config.backups_enabled:
            return None
        prompts = config.path(config.job.prompts)
        try:
            digest = file_sha256(prompts)
        except OSError as exc:
            raise RestoreRefused(
                f"job.prompts: {prompts}: {exc.strerror or exc} (a node that backs up its state "
                "needs the prompt file, to check it is the one its siblings split)") from None
        return cls(live, NodeIdentity(config.job.partition, digest, prompts.name))

    def before_open(self) -> None:
        """Refuse a prompt file the other nodes do not share; restore a missing DB."""
        try:
            check_siblings(self.reader, self.me)
            self.restored = restore_if_missing(self.reader, self.me, self.db_path)
        except UploadError as exc:
            raise BackupUnreachable(f"cannot read the output {self.reader.describe()} to look for "
                                    f"a state backup: {exc}") from None

    def after_open(self, store: Store) -> None:
        """Record whose DB this is; after a restore, take back what was uploaded since."""
        recorded = store.get_setting(Setting.PROMPTS_SHA256)
        if recorded is not None and recorded != self.me.prompts_sha256:
            log.warning("the prompt file changed since this DB was started (sha256 %s… → %s…)",
                        recorded[:12], self.me.prompts_sha256[:12])
        store.set_setting(Setting.JOB_PARTITION, self.me.partition_text or "")
        store.set_setting(Setting.PROMPTS_SHA256, self.me.prompts_sha256)
        if self.restored is None:
            return
        # Server processes the backup lists ran on the lost node: their pids mean nothing
        # here, and orphan cleanup must never act on them.
        for proc in store.server_processes():
            store.forget_server_process(proc.name)
        try:
            taken = adopt_uploaded(store, self.reader, self.me.partition)
        except UploadError as exc:
            raise BackupUnreachable(f"cannot read back this partition's shards: {exc}") from None
        store.add_event(EventKind.STATE_RESTORED, "job",
                        {"from": self.restored.db_key, "backed_up_at": self.restored.created_at,
                         "done": self.restored.done, "shards_taken_back": taken},
                        "supervisor", time.time())

    def _sink(self) -> Sink:
        if self.config.output_is_s3:
            return S3Sink(S3Location.parse(self.config.job.output), self.config.uploads)
        # A copy into the output directory, read back; the DB's own directory is the "spool".
        return LocalDirSink(self.config.path(self.config.job.output), self.db_path.parent)

    def runner(self, dispatcher: Pausing) -> StateBackup:
        async def conflict(reason: str) -> None:
            log.error("%s: dispatch paused", reason)
            await dispatcher.pause(PauseSource.PROMPT_FILE, reason, "backup")

        return StateBackup(self.db_path, self._sink(), self.reader, self.me,
                           self.config.backup.interval_s, on_conflict=conflict)
