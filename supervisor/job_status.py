"""Kept so `from supervisor.job_status import JobStatus, progress_line` keeps working; the
status snapshot lives in supervisor/job/status.py."""

from supervisor.job.progress_line import progress_line
from supervisor.job.status import JobStatus

__all__ = ["JobStatus", "progress_line"]
