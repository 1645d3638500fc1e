"""Kept so `from supervisor.job_status import JobStatus, progress_line` keeps working; the
status snapshot lives in supervisor/job/status.py."""

from supervisor.job.status import JobStatus, progress_line

__all__ = ["JobStatus", "progress_line"]
