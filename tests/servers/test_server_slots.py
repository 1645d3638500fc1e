"""The dispatcher's slots read from SGLang's /server_info: `internal_states`, one per DP rank
that answered (`sglang/srt/entrypoints/http_server.py` server_info,
`sglang/srt/managers/tokenizer_control_mixin.py` get_internal_state), each carrying
`effective_max_running_requests_per_dp` (`sglang/srt/managers/scheduler_components/
internal_state.py`). Real HTTP on loopback: the simulator, and a server that answers
/server_info without them."""

from __future__ import annotations

import http.server
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest

from supervisor.config import DispatchSection, ServersSection
from supervisor.servers.server_slots import Slots, server_slots
from supervisor.sglang.server_info import kv_bound, read_server_slots, slots_from_server_info
from tests.fixtures import REPO
from tests.fixtures.ports import free_port
from tests.fixtures.sim_servers import SimServer


def _state(per_dp: Any) -> dict[str, Any]:
    # A few of the keys one internal state carries besides the one read here.
    return {"world_size": 1, "last_gen_throughput": 0.0,
            "effective_max_running_requests_per_dp": per_dp}


@pytest.mark.parametrize("info, expected", [
    ({"dp_size": 1, "internal_states": [_state(2048)]}, 2048),
    # Two data-parallel replicas, both answering: the server runs both at once.
    ({"dp_size": 2, "internal_states": [_state(48), _state(48)]}, 96),
    # Attention DP (flag split per rank): one group leader answering for 4 ranks.
    ({"dp_size": 1, "attn_dp_size": 4, "internal_states": [_state(16)]}, 64),
    # No dp_size key at all: one answer, one rank.
    ({"internal_states": [_state(7)]}, 7),
])
def test_the_limit_is_summed_over_the_servers_dp_ranks(info: dict, expected: int) -> None:
    assert slots_from_server_info(info) == (expected, "")


@pytest.mark.parametrize("info, why", [
    ({}, "/server_info has no internal_states"),
    ({"internal_states": []}, "/server_info has no internal_states"),
    ({"internal_states": [{"world_size": 1}]},
     "/server_info internal_states carry no effective_max_running_requests_per_dp"),
    ({"internal_states": [_state(0)]},
     "/server_info internal_states carry no effective_max_running_requests_per_dp"),
    ({"internal_states": [_state(True)]},
     "/server_info internal_states carry no effective_max_running_requests_per_dp"),
    ([1, 2], "/server_info is not a JSON object"),
])
def test_answers_without_a_usable_limit_say_why(info: Any, why: str) -> None:
    assert slots_from_server_info(info) == (None, why)


@pytest.fixture
def no_limit_server() -> Iterator[str]:
    """tests/fixtures/odd_chat_server.py: answers every GET with `{}`."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "fixtures" / "odd_chat_server.py"),
                             str(port), "abort"])
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


async def _listening(url: str) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        with anyio.fail_after(20):
            while True:
                try:
                    await client.get(url + "/health", timeout=1.0)
                    return
                except httpx.HTTPError:
                    await anyio.sleep(0.05)


SERVERS = ServersSection(count=1, model_path="m", health_timeout_s=5.0)


async def test_a_server_without_the_limit_falls_back_with_a_log_line(
        no_limit_server: str, caplog: pytest.LogCaptureFixture) -> None:
    await _listening(no_limit_server)
    caplog.set_level(logging.INFO, logger="supervisor.servers")
    async with httpx.AsyncClient(trust_env=False) as client:
        assert await read_server_slots(client, no_limit_server, 5.0) == (
            None, "/server_info has no internal_states")
        slots = await server_slots("gpu3", client, no_limit_server, SERVERS, DispatchSection())
    assert slots == Slots(32, "default")
    assert [r.getMessage() for r in caplog.records] == [
        "gpu3: no max-running-requests flag and /server_info has no internal_states; "
        "dispatching 32 at once"]


async def test_a_server_that_does_not_answer_falls_back_too() -> None:
    url = f"http://127.0.0.1:{free_port()}"          # nothing listens there
    async with httpx.AsyncClient(trust_env=False) as client:
        value, why = await read_server_slots(client, url, 2.0)
        assert value is None and why.startswith("/server_info: ConnectError")
        assert await server_slots("gpu0", client, url, SERVERS, DispatchSection()) == \
            Slots(32, "default")


async def test_the_simulated_sglang_reports_its_own_limit(
        sim_server: Callable[..., SimServer]) -> None:
    # Hybrid model: the scheduler caps running requests at max-mamba-cache-size // 3.
    sim = await anyio.to_thread.run_sync(lambda: sim_server("--max-mamba-cache-size", "30"))
    async with httpx.AsyncClient(trust_env=False) as client:
        assert await read_server_slots(client, sim.base_url, 5.0) == (10, "")
        assert await server_slots("gpu0", client, sim.base_url, SERVERS, DispatchSection()) \
            == Slots(10, "server")
        flagged = replace(SERVERS, flags={"max-running-requests": 8})
        assert await server_slots("gpu0", client, sim.base_url, flagged, DispatchSection()) \
            == Slots(8, "flag")
        # The config's own limit is never second-guessed, nor is the server asked.
        assert await server_slots("gpu0", client, "http://127.0.0.1:9", flagged,
                                  DispatchSection(max_in_flight_per_server=3)) == \
            Slots(3, "dispatch")


# SGLang 0.5.23's /server_info on the CPU server (../shared/tools/sglang-cpu: 4096-token
# KV pool, no --max-running-requests), the keys read here: `dp_size` and `attn_dp_size`
# come from ServerArgs.resolved_dict (sglang/srt/server_args.py:316; the fields at
# sglang/srt/arg_groups/fields/parallel.py:73,81), `max_running_requests` is null without
# the flag, and the scheduler's own estimate is 2048 -- the floor of
# kv_cache_configurator.py resolve_max_num_reqs, whatever the pool holds.
CPU_INFO = {"dp_size": 1, "attn_dp_size": 1, "max_running_requests": None,
            "max_total_num_tokens": 4096, "internal_states": [
                {**_state(2048), "memory_usage": {"token_capacity": 4096,
                                                  "token_capacity_swa": None}}]}


def test_without_the_flag_sglangs_estimate_is_bounded_by_its_kv_pool() -> None:
    assert slots_from_server_info(CPU_INFO) == (2048, "")
    # 700 max tokens, 0.7 of them reserved each (sglang/srt/environ.py:646): 490 a request,
    # 8 in 4096 (SGLang ran 7 of 12 there, with the prompts' tokens on top).
    bound, how = kv_bound(CPU_INFO, 700)
    assert bound == 8
    assert how == "its KV pool of 4096 tokens holds 8 requests at 700 max tokens (0.7 of " \
                  "them reserved each)"
    # Attention DP: each of the 4 ranks has its own pool; one leader answering for them.
    four = {**CPU_INFO, "attn_dp_size": 4}
    assert kv_bound(four, 700)[0] == 32
    # With the flag, SGLang's figure is the flag (capped by its pools): no bound of ours.
    assert kv_bound({**CPU_INFO, "max_running_requests": 12}, 700) == (None, "")
    # No pool size to go by: no bound.
    bare = {**CPU_INFO, "max_total_num_tokens": None, "internal_states": [_state(2048)]}
    assert kv_bound(bare, 700) == (None, "")


class _InfoHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:          # noqa: N802 (the http.server name)
        body = json.dumps(CPU_INFO).encode()
        self.send_response(200 if self.path == "/server_info" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


async def test_a_server_without_the_flag_gets_the_kv_pools_bound_and_says_why(
        caplog: pytest.LogCaptureFixture) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _InfoHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    caplog.set_level(logging.INFO, logger="supervisor.servers")
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            slots = await server_slots("gpu0", client, url, SERVERS, DispatchSection(), 700)
            # Without the job's max tokens, SGLang's own figure as before.
            plain = await server_slots("gpu0", client, url, SERVERS, DispatchSection())
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert slots == Slots(8, "kv pool", "SGLang's own estimate is 2048, but its KV pool of "
                          "4096 tokens holds 8 requests at 700 max tokens (0.7 of them "
                          "reserved each)")
    assert plain == Slots(2048, "server")
    assert ("gpu0: SGLang's own estimate is 2048 requests at once (no max-running-requests) "
            "but its KV pool of 4096 tokens holds 8") in caplog.records[0].getMessage()
