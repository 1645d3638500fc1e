"""A reload's live server timings reach each server through the live settings: the restart
policy takes the new limits and keeps the failures it has counted, and a flag retuned from
the control socket stays (a reload replaces the job-wide config, not a server's own flags)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from state.async_store import AsyncStore
from state.store import Store
from supervisor.config.live_settings import LiveSettings
from supervisor.dispatch.dispatcher import Dispatcher
from supervisor.servers.fleet import Fleet
from tests.fixtures.dispatching import job_config


async def test_timings_reach_every_server_and_their_policies(tmp_path: Path) -> None:
    cfg = job_config(tmp_path, servers={"count": 2, "flags": {"max-running-requests": 8}})
    store = Store.open(tmp_path / "job.db")
    try:
        astore = AsyncStore(store)
        live = LiveSettings(cfg)
        dispatcher = Dispatcher(astore, live)
        fleet = Fleet(live, astore, dispatcher)
        gpu0 = fleet.servers["gpu0"]
        live.apply_server("gpu0", replace(gpu0.servers, flags={"max-running-requests": 4}))
        gpu0.policy.record_failure(100.0)
        new = replace(cfg, dispatch=replace(cfg.dispatch, max_attempts=7),
                      servers=replace(cfg.servers, backoff_initial_s=1.5, max_failures=9,
                                      failure_window_s=60.0))

        live.reload(new, {"backoff_initial_s": 1.5, "max_failures": 9, "failure_window_s": 60.0})

        for server in fleet.servers.values():
            p = server.policy
            assert (p.initial_s, p.max_failures, p.window_s) == (1.5, 9, 60.0)
            assert server.servers.backoff_initial_s == 1.5
            assert server.ready.dispatch.max_attempts == 7
        assert gpu0.policy.failures_in_window(110.0) == 1
        assert gpu0.servers.flags == {"max-running-requests": 4}
        assert fleet.servers["gpu1"].servers.flags == cfg.servers.flags
        # One owner: the fleet, the dispatcher and the job-wide view read the same settings.
        assert fleet.config is dispatcher.config is live.config
        assert live.config.dispatch.max_attempts == 7
    finally:
        store.close()
