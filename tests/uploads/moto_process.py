"""Moved to tests/fixtures/moto_s3.py; kept importable here for tests written before the move."""

from tests.fixtures.moto_s3 import *  # noqa: F401,F403
