"""Shards from the spool to their destination (S3 or a local directory), verified, plus the
disk guard that pauses dispatch before the spool's disk fills. See README.md here."""

from supervisor.uploads.disk_guard import DiskGuard
from supervisor.uploads.sink import (
                                     CorruptUploadError,
                                     FatalUploadError,
                                     Receipt,
                                     ShardBlob,
                                     Sink,
                                     TransientUploadError,
                                     UploadError,
)
from supervisor.uploads.upload_status import UploadStatus
from supervisor.uploads.uploader import Uploader

__all__ = ["CorruptUploadError", "DiskGuard", "FatalUploadError", "Receipt", "ShardBlob", "Sink",
           "TransientUploadError", "UploadError", "UploadStatus", "Uploader"]
