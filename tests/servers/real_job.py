"""Moved to tests/fixtures/real_job.py; kept importable here for tests written before the move."""

from tests.fixtures.real_job import *  # noqa: F401,F403
