"""The server state table: every allowed and every refused pair, and ManagedServer checking
each transition against it."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import anyio
import pytest

from supervisor.config import JobConfig, ServersSection
from supervisor.config.live_settings import LiveSettings
from supervisor.servers.fleet_context import FleetContext
from supervisor.servers.managed_server import ManagedServer
from supervisor.servers.process_launcher import ProcessLauncher
from supervisor.servers.restart_policy import RestartPolicy
from supervisor.servers.server_log import ServerLog
from supervisor.servers.server_state import (
    ALLOWED_TRANSITIONS,
    ATTACHED_TRANSITIONS,
    IllegalTransition,
    ServerState,
    check_transition,
)

S = ServerState

# Written out by hand, apart from the table: a change to the table must be made here too,
# on purpose, with the life-cycle path that needs it.
EXPECTED = {
    (S.STOPPED, S.STARTING),
    (S.STARTING, S.READY), (S.STARTING, S.STOPPING), (S.STARTING, S.BACKOFF),
    (S.STARTING, S.FAILED), (S.STARTING, S.STOPPED),
    (S.READY, S.DRAINING), (S.READY, S.STOPPING),
    (S.DRAINING, S.STOPPING),
    (S.STOPPING, S.STOPPED), (S.STOPPING, S.BACKOFF), (S.STOPPING, S.FAILED),
    (S.STOPPING, S.STOPPING),
    (S.BACKOFF, S.STARTING), (S.BACKOFF, S.STOPPED),
    (S.FAILED, S.STARTING), (S.FAILED, S.STOPPED),
}
# An attached server (servers.attach): never launched, restarted or stopped by the daemon.
ATTACHED = {
    (S.STOPPED, S.STARTING),
    (S.STARTING, S.READY), (S.STARTING, S.GONE), (S.STARTING, S.STOPPED),
    (S.READY, S.GONE), (S.READY, S.STOPPED),
    (S.GONE, S.READY), (S.GONE, S.STOPPED),
}
# GONE is an attached server's state only; the daemon's own servers never take it.
OWN_STATES = set(ServerState) - {S.GONE}
PAIRS = list(itertools.product(ServerState, repeat=2))


def test_the_table_is_exactly_the_expected_transitions():
    assert set(ALLOWED_TRANSITIONS) == OWN_STATES
    assert {(a, b) for a, targets in ALLOWED_TRANSITIONS.items() for b in targets} == EXPECTED
    assert {(a, b) for a, targets in ATTACHED_TRANSITIONS.items() for b in targets} == ATTACHED


@pytest.mark.parametrize("old,new", PAIRS, ids=lambda s: str(s))
def test_the_attached_table_allows_exactly_its_pairs(old, new):
    if (old, new) in ATTACHED:
        check_transition(old, new, ATTACHED_TRANSITIONS)
    else:
        with pytest.raises(IllegalTransition, match=f"{old} -> {new}"):
            check_transition(old, new, ATTACHED_TRANSITIONS)


@pytest.mark.parametrize("old,new", [p for p in PAIRS if p in EXPECTED],
                         ids=lambda s: str(s))
def test_allowed_pair_passes(old, new):
    check_transition(old, new)


@pytest.mark.parametrize("old,new", [p for p in PAIRS if p not in EXPECTED],
                         ids=lambda s: str(s))
def test_refused_pair_raises_naming_both_states(old, new):
    with pytest.raises(IllegalTransition, match=f"{old} -> {new}"):
        check_transition(old, new)


def test_every_state_is_reachable_and_every_state_can_reach_stopped():
    def reachable(start: ServerState, table=ALLOWED_TRANSITIONS) -> set[ServerState]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in table[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    assert reachable(S.STOPPED) == OWN_STATES
    # The daemon can always shut a server down, whatever state it is in.
    assert all(S.STOPPED in reachable(s) for s in OWN_STATES)
    attached = set(ATTACHED_TRANSITIONS)
    assert reachable(S.STOPPED, ATTACHED_TRANSITIONS) == attached
    assert all(S.STOPPED in reachable(s, ATTACHED_TRANSITIONS) for s in attached)


def _server(tmp_path: Path, events: list[tuple]) -> ManagedServer:
    servers = ServersSection(count=1, model_path="m")

    async def store_call(*args: object) -> None:
        events.append(args)

    ctx = FleetContext(store_call=store_call, dispatcher=None, client=None,  # type: ignore[arg-type]
                       clock=time.time, monotonic=time.monotonic, on_change=lambda: None,
                       proc_limiter=anyio.CapacityLimiter(1), launcher=ProcessLauncher())
    return ManagedServer("gpu0", (0,), 30000, LiveSettings(JobConfig(servers=servers)), ctx,
                         ServerLog(tmp_path / "gpu0.log"), RestartPolicy.from_config(servers))


async def test_managed_server_refuses_a_transition_off_the_table(tmp_path: Path):
    events: list[tuple] = []
    server = _server(tmp_path, events)
    assert server.state is S.STOPPED
    with pytest.raises(IllegalTransition):
        await server.transitions.to(S.READY, "skipping STARTING")
    assert server.state is S.STOPPED and events == []      # nothing changed, nothing recorded
    await server.transitions.to(S.STARTING, "a start")
    assert server.state is S.STARTING
    [(method, kind, name, detail, actor, _)] = events
    assert getattr(method, "__name__", method) == "add_event"
    assert (kind, name, actor) == ("server_state", "gpu0", "supervisor")
    assert (detail["from"], detail["to"]) == ("STOPPED", "STARTING")
