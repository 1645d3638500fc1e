"""Shared fixtures: real simulated SGLang servers on loopback."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

from supervisor.free_ports import free_port
from tests.fixtures.sim_servers import SimServer, sim_argv, wait_healthy


@pytest.fixture
def sim_server(tmp_path: Path) -> Iterator[Callable[..., SimServer]]:
    """Start simulated SGLang servers as real child processes (own process group);
    every one is killed at the end of the test."""
    started: list[SimServer] = []

    def start(*flags: str, wait: bool = True) -> SimServer:
        port = free_port()
        log_path = tmp_path / f"sim-{port}.log"
        log = open(log_path, "wb")
        proc = subprocess.Popen(sim_argv(port, *flags), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        server = SimServer(proc, port, log_path)
        started.append(server)
        if wait:
            wait_healthy(server.base_url, proc)
        return server

    yield start
    for server in started:
        server.stop()
