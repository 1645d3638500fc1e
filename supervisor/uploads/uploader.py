"""The background uploader: written shards → the sink → verified → marked uploaded.

One loop on the event loop picks what to upload; the bytes move in worker threads, at most
`concurrency` at a time, so a slow store never stalls dispatch. The DB decides everything:
a shard is taken when the store says 'written', and only `mark_shard_uploaded` with the digest
of the bytes the sink verified makes it 'uploaded' (a shard rewritten meanwhile keeps its new
status and goes out again). So after any crash, whatever is not marked is simply uploaded
again under the same key, with the same bytes.

Failures:
- transient (throttling, 5xx, timeouts, refused connections, a corrupt upload): the shard
  stays in the backlog, its failure is noted in the DB, and no new upload starts until a
  backoff after the last failure has passed (doubling with each consecutive failure, so an
  outage costs a request now and then, not a storm). A shard that failed goes to the back of
  the line, so one bad shard cannot hold up the rest.
- fatal (credentials, permissions, no bucket): uploads stop, an event and the status say why;
  generation goes on, and the shards wait in the spool for the next start.
The spool copy is deleted only after a verified upload, unless `keep_local`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from state.async_store import AsyncStore
from state.records import Shard
from state.store import Store
from supervisor.contract.event_kinds import EventKind
from supervisor.uploads.backoff import Backoff
from supervisor.uploads.sink import (
    CorruptUploadError,
    FatalUploadError,
    ShardBlob,
    Sink,
    TransientUploadError,
)
from supervisor.uploads.upload_status import UploadRateWindow, UploadStatus

log = logging.getLogger("supervisor.uploads")

ACTOR = "uploader"
# With nothing to do, look at the DB this often even without a poke (a shard rewritten by a
# requeue, a backoff that has run out).
IDLE_INTERVAL_S = 1.0


class _Missing(Exception):
    """The spool file is gone or holds other bytes than the DB says."""


def _read_blob(path: Path, shard: Shard) -> ShardBlob:
    try:
        blob = ShardBlob.read(shard.key, path)
    except FileNotFoundError:
        raise _Missing(f"{path} is missing") from None
    if blob.sha256 != shard.sha256:
        raise _Missing(f"{path} holds sha256 {blob.sha256[:16]}…, the DB says "
                       f"{(shard.sha256 or '')[:16]}…")
    return blob


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


class Uploader:
    def __init__(self, astore: AsyncStore, sink: Sink, spool: Path, *, concurrency: int = 4,
                 keep_local: bool = False, backoff: Backoff = Backoff(),
                 drain_timeout_s: float = 600.0, clock: Callable[[], float] = time.time,
                 idle_interval_s: float = IDLE_INTERVAL_S) -> None:
        self.astore = astore
        self.sink = sink
        self.spool = Path(spool)
        self.concurrency = concurrency
        self.keep_local = keep_local or not sink.removes_local
        self.backoff = backoff
        self.drain_timeout_s = drain_timeout_s
        self.clock = clock
        self.idle_interval_s = idle_interval_s
        self._limiter = anyio.CapacityLimiter(concurrency)
        self._wake = anyio.Event()
        self._in_flight: set[int] = set()
        self._failed_ids: dict[int, int] = {}      # shard id → failures in this run
        self._prepared = False
        self._not_before = 0.0                     # monotonic: no new upload before this
        self._rate = UploadRateWindow()
        # Figures for status(), refreshed from the DB on every pass.
        self._backlog = (0, 0)
        self._uploaded = (0, 0)
        self.last_success_at: float | None = None
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.corrupt_total = 0
        self.stopped: str | None = None

    # -- the job's interface ------------------------------------------------------------------

    def poke(self) -> None:
        """New shards were written: look now rather than at the next idle tick."""
        self._wake.set()

    def reconfigure(self, *, concurrency: int, keep_local: bool, backoff: Backoff,
                    drain_timeout_s: float) -> None:
        """A reloaded config: uploads started from now on follow it."""
        self.concurrency = concurrency
        self._limiter.total_tokens = concurrency
        self.keep_local = keep_local or not self.sink.removes_local
        self.backoff = backoff
        self.drain_timeout_s = drain_timeout_s

    def status(self) -> UploadStatus:
        bytes_s, shards_s = self._rate.rates(self.clock())
        return UploadStatus(
            destination=self.sink.describe(), remote=self.sink.remote,
            backlog_shards=self._backlog[0], backlog_bytes=self._backlog[1],
            uploaded_shards=self._uploaded[0], uploaded_bytes=self._uploaded[1],
            in_flight=len(self._in_flight), bytes_per_s=bytes_s, shards_per_s=shards_s,
            last_success_at=self.last_success_at,
            consecutive_failures=self.consecutive_failures, last_error=self.last_error,
            corrupt_total=self.corrupt_total, stopped=self.stopped)

    async def run(self) -> None:
        """Upload for as long as the job runs (it is cancelled at the end)."""
        await self._loop(until_drained=False)

    async def drain(self, timeout_s: float | None = None) -> bool:
        """At the end of a finished job: upload the rest, within the drain timeout.
        Returns whether the backlog is empty (what is left goes out at the next start)."""
        limit = self.drain_timeout_s if timeout_s is None else timeout_s
        with anyio.move_on_after(limit):
            await self._loop(until_drained=True)
        await self._refresh()
        if self._backlog[0]:
            log.warning("uploads: %d shards (%d bytes) still waiting at the end of the job%s",
                        *self._backlog, f" (stopped: {self.stopped})" if self.stopped else "")
        return self._backlog[0] == 0

    # -- the loop -----------------------------------------------------------------------------

    async def _loop(self, until_drained: bool) -> None:
        await self._prepare()
        async with anyio.create_task_group() as tg:
            while True:
                waiting = await self._start_due(tg)
                if until_drained and not self._in_flight and (not waiting or self.stopped):
                    break
                await self._sleep()
            tg.cancel_scope.cancel()

    async def _sleep(self) -> None:
        # Until a poke, an upload ending, or the idle tick; never past the backoff's end.
        wait = self.idle_interval_s
        if self._not_before:
            wait = min(wait, max(0.01, self._not_before - time.monotonic()))
        with anyio.move_on_after(wait):
            await self._wake.wait()
        self._wake = anyio.Event()

    async def _refresh(self) -> None:
        # One read for both: a status must never show a shard as waiting and uploaded.
        self._backlog, self._uploaded = await self.astore.call(Store.upload_totals)

    async def _start_due(self, tg: TaskGroup) -> int:
        """Start uploads for waiting shards while there is room; returns how many wait."""
        await self._refresh()
        shards = await self.astore.call(Store.shards_to_upload)
        waiting = [s for s in shards if s.id not in self._in_flight]
        if self.stopped or time.monotonic() < self._not_before:
            return len(waiting)
        waiting.sort(key=lambda s: (self._failed_ids.get(s.id, 0), s.id))
        for shard in waiting:
            if len(self._in_flight) >= self.concurrency:
                break
            self._in_flight.add(shard.id)
            tg.start_soon(self._upload, shard, name=f"upload {shard.key}")
        return len(waiting)

    async def _prepare(self) -> None:
        """Once: clear what a killed daemon left (open multipart uploads, spool copies of
        shards it had already marked uploaded)."""
        if self._prepared:
            return
        self._prepared = True
        shards = await self.astore.call(Store.shards)
        try:
            await anyio.to_thread.run_sync(self.sink.prepare, {s.key for s in shards})
        except FatalUploadError as exc:
            await self._stop(str(exc))
        except Exception as exc:
            # Housekeeping only (and never a reason to take the job down): the uploads
            # themselves will find out whether the store is there.
            log.warning("uploads: could not clear earlier multipart uploads: %s", exc)
        if not self.keep_local:
            done = [self.spool / s.key for s in shards if s.status == "uploaded"]
            await anyio.to_thread.run_sync(lambda: [_unlink(p) for p in done])
        await self._refresh()
        log.info("uploads to %s: %d shards waiting (%d bytes), %d uploaded",
                 self.sink.describe(), *self._backlog, self._uploaded[0])

    # -- one shard ----------------------------------------------------------------------------

    async def _upload(self, shard: Shard) -> None:
        path = self.spool / shard.key
        try:
            blob = await anyio.to_thread.run_sync(_read_blob, path, shard, limiter=self._limiter)
            receipt = await anyio.to_thread.run_sync(self.sink.put, blob, limiter=self._limiter)
        except _Missing as exc:
            await self._rewrite(shard, str(exc))
        except FatalUploadError as exc:
            await self._failed(shard, str(exc))
            await self._stop(str(exc))
        except CorruptUploadError as exc:
            self.corrupt_total += 1
            log.warning("upload of %s arrived corrupt, uploading it again: %s", shard.key, exc)
            with anyio.CancelScope(shield=True):
                await self.astore.call(Store.add_event, EventKind.UPLOAD_CORRUPT, shard.key,
                                       {"error": str(exc)}, ACTOR, self.clock())
            await self._failed(shard, str(exc))
        except TransientUploadError as exc:
            await self._failed(shard, str(exc))
        except Exception as exc:
            # A bug or an error no sink classified: retried like a transient one, but loudly.
            log.exception("upload of %s failed unexpectedly", shard.key)
            await self._failed(shard, f"{type(exc).__name__}: {exc}")
        else:
            # Shielded as a whole: the bytes are verified at the destination, and a job ending
            # right now must neither lose the mark (a needless re-upload) nor the spool
            # deletion after it (a copy left behind until the next start). Both are quick.
            with anyio.CancelScope(shield=True):
                await self._succeeded(shard, blob, receipt.etag, receipt.checksum, path)
        finally:
            self._in_flight.discard(shard.id)
            self._wake.set()

    async def _succeeded(self, shard: Shard, blob: ShardBlob, etag: str | None,
                         checksum: str, path: Path) -> None:
        now = self.clock()
        marked = await self.astore.call(Store.mark_shard_uploaded, shard.id, etag, checksum,
                                        now, sha256=blob.sha256)
        if not marked:
            log.info("shard %s changed while uploading; its new bytes go out next", shard.key)
            return
        if self.consecutive_failures:
            log.info("uploads to %s work again after %d failures", self.sink.describe(),
                     self.consecutive_failures)
            await self.astore.call(Store.add_event, EventKind.UPLOADS_RECOVERED, "uploads",
                                   {"failures": self.consecutive_failures}, ACTOR, now)
        self.consecutive_failures = 0
        self._not_before = 0.0
        self._failed_ids.pop(shard.id, None)
        self.last_success_at = now
        self._rate.add(now, blob.size)
        # A local directory has no ETag: its checksum is what was verified.
        proof = f"ETag {etag}" if etag is not None else checksum
        log.info("shard %s uploaded to %s (%d bytes, %s)", shard.key, self.sink.describe(),
                 blob.size, proof)
        if not self.keep_local:
            # A rewrite landing between the mark and this unlink loses only the spool copy:
            # the next pass finds the file missing and the writer rebuilds it from the DB.
            await anyio.to_thread.run_sync(_unlink, path)

    async def _failed(self, shard: Shard, error: str) -> None:
        self.consecutive_failures += 1
        self.last_error = f"{shard.key}: {error}"
        self._failed_ids[shard.id] = self._failed_ids.get(shard.id, 0) + 1
        delay = self.backoff.delay(self.consecutive_failures)
        self._not_before = max(self._not_before, time.monotonic() + delay)
        log.warning("upload of %s failed (%d in a row), next try in %.1f s: %s", shard.key,
                    self.consecutive_failures, delay, error)
        with anyio.CancelScope(shield=True):
            await self.astore.call(Store.note_upload_failure, shard.id, error)
            if self.consecutive_failures == 1:
                await self.astore.call(Store.add_event, EventKind.UPLOADS_FAILING, "uploads",
                                       {"shard": shard.key, "error": error}, ACTOR, self.clock())

    async def _stop(self, reason: str) -> None:
        if self.stopped:
            return
        self.stopped = reason
        log.error("uploads to %s stopped (generation goes on; shards wait in %s): %s",
                  self.sink.describe(), self.spool, reason)
        with anyio.CancelScope(shield=True):
            await self.astore.call(Store.add_event, EventKind.UPLOADS_STOPPED, "uploads",
                                   {"reason": reason, "destination": self.sink.describe()},
                                   ACTOR, self.clock())

    async def _rewrite(self, shard: Shard, why: str) -> None:
        with anyio.CancelScope(shield=True):
            reset = await self.astore.call(Store.rewrite_shard, shard.id, shard.sha256 or "")
        if reset:
            log.warning("shard %s: %s; the writer rebuilds it from the DB", shard.key, why)
