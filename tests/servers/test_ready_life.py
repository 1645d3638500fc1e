"""The READY life on its own (servers/ready_life.py): a simulated SGLang server as a real child
process, the fleet tests' dispatcher (tests/fixtures/fake_dispatcher.py) sending it prompts
from a real state store over loopback HTTP, and the end of the life said by what its kind
gives it (LifeEnds). Also: the dispatcher and its test twin are all of what the servers ask
of them (servers/dispatcher_view.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx

from state.async_store import AsyncStore
from state.store import Store
from supervisor.config.live_settings import LiveSettings
from supervisor.dispatch.dispatch_snapshot import ServerProgress
from supervisor.dispatch.dispatcher import Dispatcher
from supervisor.servers.dispatcher_view import Dispatching, ServerProgressView
from supervisor.servers.fleet_context import FleetContext
from supervisor.servers.process_group import ServerProcess
from supervisor.servers.process_launcher import ProcessLauncher
from supervisor.servers.ready_life import LifeEnds, ReadyLife
from supervisor.servers.server_state import ALLOWED_TRANSITIONS, ServerState
from supervisor.servers.transitions import Transitions
from supervisor.servers.watchers import Failure, Request, watch_exit
from tests.fixtures.dispatching import db_rows, job_config, open_store, wait_until
from tests.fixtures.fake_dispatcher import FakeDispatcher, Progress
from tests.fixtures.sim_servers import SimServer

S = ServerState
PROMPTS = 60
SLOTS = 4


def test_the_dispatcher_and_its_test_twin_are_all_the_servers_ask(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "job.db")
    try:
        real = Dispatcher(AsyncStore(store), job_config(tmp_path))
        twin = FakeDispatcher(store_call=_unused, client=httpx.AsyncClient(trust_env=False))
        assert isinstance(real, Dispatching) and isinstance(twin, Dispatching)
        assert isinstance(real.progress("gpu0"), ServerProgressView)
        assert isinstance(twin.progress("gpu0"), ServerProgressView)
        assert isinstance(ServerProgress(), ServerProgressView)
        assert isinstance(Progress(), ServerProgressView)
        # A record short of one member is not one (the check can fail).
        assert not isinstance(object(), ServerProgressView)
        assert real.inflight_limit("gpu0") is None and twin.inflight_limit("gpu0") is None
    finally:
        store.close()


async def _unused(*args: Any) -> None:
    raise AssertionError("not called")


class _Life:
    """One READY life of a simulated server, with the store, the dispatcher and the events."""

    def __init__(self, tmp_path: Path, sim: SimServer, client: httpx.AsyncClient) -> None:
        self.tmp_path = tmp_path
        self.base_url = sim.base_url
        store = open_store(tmp_path, [{"id": f"p{i}", "messages": [
            {"role": "user", "content": f"question {i}"}]} for i in range(PROMPTS)])
        self.astore = AsyncStore(store)

        async def by_name(method: str, *args: Any) -> Any:
            return await self.astore.call(getattr(Store, method), *args)

        self.dispatcher = FakeDispatcher(store_call=by_name, client=client)
        self.ctx = FleetContext(
            store_call=self.astore.call, dispatcher=self.dispatcher, client=client,
            clock=time.time, monotonic=time.monotonic, on_change=lambda: None,
            proc_limiter=anyio.CapacityLimiter(2), launcher=ProcessLauncher(), exit_poll_s=0.05)
        # Health probes that never decide (the kill test's end is the exit watcher's).
        live = LiveSettings(job_config(tmp_path, servers={
            "health_interval_s": 0.2, "health_failures": 1000, "drain_timeout_s": 30.0}))
        live.add_server("gpu0")
        self.transitions = Transitions("gpu0", ALLOWED_TRANSITIONS, self.ctx)
        self.ready = ReadyLife("gpu0", live, lambda: live.server("gpu0"), self.ctx,
                               self.transitions)
        self.proc = ServerProcess(sim.proc.pid, sim.proc.pid, (), time.time(), popen=sim.proc)

    async def done(self) -> int:
        return (await self.astore.call(Store.counts)).done

    def events(self) -> list[tuple[str, str, dict[str, Any]]]:
        rows = db_rows(self.tmp_path, "SELECT kind, actor, detail FROM events ORDER BY id")
        return [(kind, actor, json.loads(detail)) for kind, actor, detail in rows]

    async def serve(self, ends: LifeEnds,
                    then: Callable[[], Awaitable[None]]) -> Request | Failure:
        await self.transitions.to(S.STARTING, "a test's start")
        result: list[Request | Failure] = []

        async def life() -> None:
            result.append(await self.ready.serve(self.base_url, (), "answered", ends,
                                                 pid=self.proc.pid))

        try:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(life)
                    await wait_until(lambda: self.transitions.state is S.READY, 30, "READY")
                    await wait_until(lambda: self.done(), 30, "a first answer")
                    await then()
            self.counts = await self.astore.call(Store.counts)
        finally:
            with anyio.CancelScope(shield=True):
                await self.astore.close()
        return result[0]


async def test_a_restart_request_drains_the_life_and_every_answer_is_kept(
        tmp_path: Path, sim_server: Callable[..., SimServer]) -> None:
    sim = sim_server("--max-running-requests", str(SLOTS), "--sim-tokens-per-s", "400")
    async with httpx.AsyncClient(trust_env=False) as client:
        life = _Life(tmp_path, sim, client)
        asked = anyio.Event()

        async def requests() -> Request | None:
            await asked.wait()
            return Request("restart", "tester", "a drain test")

        async def exited() -> str | None:
            return None if sim.proc.poll() is None else f"exit {sim.proc.returncode}"

        async def ask() -> None:
            # Served at the limit /server_info gave, its own live limit published meanwhile.
            assert life.ready.max_running == SLOTS
            limit = life.ready.inflight_limit()
            assert limit is not None and limit.max == SLOTS
            assert life.ready.fields()["inflight_limit"] == SLOTS
            asked.set()

        ends = LifeEnds(alive=partial(watch_exit, life.proc, poll_s=0.05), requests=requests,
                        exited=exited)
        outcome = await life.serve(ends, ask)
    counts = life.counts

    assert outcome == Request("restart", "tester", "a drain test")
    assert sim.proc.poll() is None                     # a drain stops nothing by itself
    # Drained: what was on the wire finished, nothing was cut and nothing is left in flight.
    assert life.dispatcher.requeued == [] and counts.in_flight == 0
    assert len(set(life.dispatcher.done_ids)) == len(life.dispatcher.done_ids) == counts.done
    assert counts.done + counts.pending == PROMPTS and 0 < counts.done
    assert life.ready.endpoint is None and life.ready.inflight_limit() is None
    moves = [(d["from"], d["to"], actor) for kind, actor, d in life.events()
             if kind == "server_state"]
    assert moves == [("STOPPED", "STARTING", "supervisor"), ("STARTING", "READY", "supervisor"),
                     ("READY", "DRAINING", "tester")]
    ready = next(d for kind, _, d in life.events() if d.get("to") == "READY")
    assert (ready["pid"], ready["max_running"], ready["slots_from"]) == (
        sim.proc.pid, SLOTS, "server")
    assert life.transitions.reason == "a drain test by tester"
    # Every answer of the life counts, those finished while it drained too (after the
    # watchers' last look): a life that answered is never said to have failed before it.
    assert life.ready.life_progress is not None
    assert life.ready.life_progress.answered == counts.done


async def test_a_server_gone_mid_life_ends_it_at_once_and_its_requests_go_back(
        tmp_path: Path, sim_server: Callable[..., SimServer]) -> None:
    # A kind that takes no requests (an attached server's): its end is only what it watches.
    sim = sim_server("--max-running-requests", str(SLOTS), "--sim-tokens-per-s", "40")
    async with httpx.AsyncClient(trust_env=False) as client:
        life = _Life(tmp_path, sim, client)

        async def kill() -> None:
            await wait_until(lambda: life.ready.in_flight() > 0, 30, "requests in flight")
            sim.stop()

        outcome = await life.serve(LifeEnds(alive=partial(watch_exit, life.proc, poll_s=0.05)),
                                   kill)
    counts = life.counts

    assert isinstance(outcome, Failure) and "killed by signal 9" in outcome.detail
    # Its requests in flight went back to pending, none lost and none done twice.
    assert life.dispatcher.requeued and counts.in_flight == 0
    assert counts.done + counts.pending == PROMPTS
    assert len(set(life.dispatcher.done_ids)) == len(life.dispatcher.done_ids)
    moves = [d["to"] for kind, _, d in life.events() if kind == "server_state"]
    assert moves == ["STARTING", "READY"]               # no drain: the kind ends the life
    assert life.ready.endpoint is None
