"""The daemon's main loop and what it is built from: opening the state, the status snapshot,
what systemd is told, and when the job ends."""

from supervisor.job.main_loop import Job, JobResult
from supervisor.job.progress_line import progress_line
from supervisor.job.status import JobStatus
from supervisor.job.store_setup import JobError

__all__ = ["Job", "JobError", "JobResult", "JobStatus", "progress_line"]
