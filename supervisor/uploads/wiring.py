"""The job's uploader and disk guard, built from its config."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from state.async_store import AsyncStore
from supervisor.config import JobConfig
from supervisor.uploads.backoff import Backoff
from supervisor.uploads.disk_guard import DiskGuard
from supervisor.uploads.local_sink import LocalDirSink
from supervisor.uploads.s3_client import S3Location
from supervisor.uploads.s3_sink import S3Sink
from supervisor.uploads.sink import Sink
from supervisor.uploads.uploader import Uploader


def build_sink(config: JobConfig, spool: Path) -> Sink:
    if config.output_is_s3:
        # boto3 is otherwise imported at the first upload: a broken install must stop the
        # start, not leave a job that generates everything and uploads nothing.
        import boto3  # noqa: F401
        return S3Sink(S3Location.parse(config.job.output), config.uploads)
    return LocalDirSink(config.path(config.job.output), spool)


def build_uploads(config: JobConfig, astore: AsyncStore,
                  spool: Path) -> tuple[Uploader, DiskGuard]:
    """For an S3 output, the uploader moves shards from the spool to the bucket; for a local
    one it verifies each file in the output directory, so 'uploaded' means "delivered" for
    both. The disk guard watches the spool either way: that is where shards are written."""
    u = config.uploads
    uploader = Uploader(astore, build_sink(config, spool), spool, concurrency=u.concurrency,
                        keep_local=u.keep_local,
                        backoff=Backoff(u.retry_initial_s, u.retry_max_s),
                        drain_timeout_s=u.drain_timeout_s)
    return uploader, DiskGuard(spool, u.min_free_bytes)


def output_location(config: JobConfig, spool: Path, state: Path) -> str:
    """Everything needed to reach this job's output again without its config file (kept in
    the state DB): the output, the spool, the partition, the uploads section (no secrets:
    credentials always come from boto3's chain), and where the DB itself was, so that a copied
    or moved DB is known for one and its recorded output is not taken as the one beside it."""
    output = config.job.output if config.output_is_s3 else str(config.path(config.job.output).resolve())
    return json.dumps({"output": output, "spool": str(spool.resolve()),
                       "state": str(Path(state).resolve()),
                       "partition": str(config.job.partition) if config.job.partition else None,
                       "uploads": asdict(config.uploads)}, sort_keys=True)


def config_for_output(location: str) -> tuple[JobConfig, Path]:
    """A config that reaches the output recorded by `output_location` (and its spool)."""
    from supervisor.config import parse_config

    data = json.loads(location)
    job = {"output": data["output"]}
    if data.get("partition"):
        job["partition"] = data["partition"]
    uploads = {k: v for k, v in data["uploads"].items() if v is not None}
    # Servers and generation only have to be valid: nothing is launched or generated.
    cfg = parse_config({"job": job, "uploads": uploads, "generation": {"enable_thinking": False},
                        "servers": {"count": 1, "model_path": "-"}})
    return cfg, Path(data["spool"])
