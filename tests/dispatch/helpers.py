"""Moved to tests/fixtures/dispatching.py; kept importable here for tests written before the move."""

from tests.fixtures.dispatching import *  # noqa: F401,F403
