"""Kept importable for tests written before the helpers moved into tests/fixtures/ (one module
per thing they provide); new tests import from there."""

from supervisor.free_ports import free_port  # noqa: F401
from tests.fixtures import REPO  # noqa: F401
from tests.fixtures.real_prompts import real_prompts as shared_prompts  # noqa: F401
from tests.fixtures.real_prompts import write_jsonl  # noqa: F401
from tests.fixtures.sim_servers import SimServer, sim_argv, wait_healthy  # noqa: F401
from tests.fixtures.state_db import read_db  # noqa: F401
