"""Moved to tests/fixtures/state_db.py; kept importable here for tests written before the move."""

from tests.fixtures.state_db import *  # noqa: F401,F403
