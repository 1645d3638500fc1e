"""The fleet: every server of the job, started together, restarted one at a time.

`Fleet.run()` first looks at the servers a previous daemon left running: it adopts those
proven to be this job's (adoption.py) and stops the rest of its own leftovers, then runs one
ManagedServer task per GPU (or tensor-parallel group) and one AttachedServer task per
attached URL until cancelled; cancelling it stops every process group and waits for them
(unless `keep_servers_on_exit` is set: then they are left running for the next daemon to
adopt). Operator actions (restart, retune, reset) are methods, on the servers it launched
only (an attached server's kind refuses them); a rolling restart waits for each server to be
READY again before touching the next, so throughput never drops to zero. One roll at a
time, whoever asks (the control socket, a config reload): a second is refused at once
(`RollBusy`), never queued behind the first.
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx

from state.async_store import AsyncStore
from state.records import InFlightClaim
from state.settings_keys import Setting
from state.store import Store
from supervisor.config import ConfigError, JobConfig
from supervisor.config.attach_urls import attach_targets
from supervisor.config.live_settings import LiveSettings
from supervisor.contract.event_kinds import EventKind
from supervisor.servers.adoption import Action, judge
from supervisor.servers.attached_server import AttachedServer, NotOurs
from supervisor.servers.dispatcher_view import Dispatching
from supervisor.servers.flag_gate import require_accepted_retune
from supervisor.servers.fleet_context import FleetContext
from supervisor.servers.launch_command import build_specs, server_devices
from supervisor.servers.launcher import Launcher
from supervisor.servers.managed_server import ManagedServer
from supervisor.servers.orphans import stop_orphan
from supervisor.servers.process_launcher import ProcessLauncher
from supervisor.servers.restart_policy import RestartPolicy
from supervisor.servers.server_kind import SupervisedServer
from supervisor.servers.server_log import ServerLog
from supervisor.servers.server_state import ServerSnapshot, ServerState

log = logging.getLogger("supervisor.servers")
T = TypeVar("T")


@dataclass(frozen=True)
class FleetOptions:
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    rng: random.Random | None = None          # backoff jitter; seed it for reproducible tests
    base_env: Mapping[str, str] | None = None  # default: the daemon's environment
    cwd: str | None = None
    log_max_bytes: int = 64 * 1024 * 1024
    log_backups: int = 3
    tail_lines: int = 2000
    exit_poll_s: float = 0.2
    startup_probe_s: float = 1.0
    kill_wait_s: float = 10.0
    cleanup_orphans: bool = True
    # Who starts and stops the servers. The job passes the one `servers.launcher` names
    # (launcher_choice.py); a fleet of its own (a test, a tool) runs them as its children.
    launcher: Launcher | None = None


@dataclass(frozen=True)
class RollingResult:
    """How a restart/retune went: which servers came back, and where it stopped if not all."""

    restarted: tuple[str, ...]
    aborted_at: str | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.aborted_at is None


class RollBusy(RuntimeError):
    """A rolling restart or retune runs already; the message names it."""


class RollTicket:
    """The right to run the one roll: taken before the roll starts, so a caller that answers
    before the roll runs (the socket's 202, a reload) knows at once whether it may."""

    def __init__(self, what: str) -> None:
        self.what = what


class Fleet:
    def __init__(self, live: LiveSettings | JobConfig, astore: AsyncStore,
                 dispatcher: Dispatching, options: FleetOptions | None = None) -> None:
        # The job's live settings, shared with the dispatcher (a bare config: a fleet of its
        # own, for a test or a tool).
        self.live = live if isinstance(live, LiveSettings) else LiveSettings(live)
        config = self.live.config
        self.astore = astore
        self.dispatcher = dispatcher
        self.options = options or FleetOptions()
        o = self.options
        # The hook for "keep the servers when the daemon stops" (a systemd restart of the
        # daemon's unit, decided where the stop is known): set before the fleet is
        # cancelled, it leaves every running server for the next daemon to adopt.
        self.keep_servers_on_exit = False
        # The prompts an earlier daemon had in flight when it died (the job's store setup
        # reads them before requeueing them): an adopted server gets them aborted by id.
        self.left_in_flight: list[InFlightClaim] = []
        self._changed = anyio.Event()
        self._roll_ticket: RollTicket | None = None
        specs = build_specs(config.servers)
        targets = attach_targets(config.servers.attach)
        launcher = o.launcher if o.launcher is not None else ProcessLauncher()
        self.launcher = launcher
        self._ctx = FleetContext(
            store_call=self._store_call, dispatcher=dispatcher,
            client=None,  # type: ignore[arg-type]  # set in run()
            clock=o.clock, monotonic=o.monotonic, on_change=self._on_change,
            proc_limiter=anyio.CapacityLimiter(2 * (len(specs) + len(targets)) + 2),
            launcher=launcher,
            base_env=None if o.base_env is None else dict(o.base_env), cwd=o.cwd,
            exit_poll_s=o.exit_poll_s, startup_probe_s=o.startup_probe_s,
            kill_wait_s=o.kill_wait_s, keep_on_exit=lambda: self.keep_servers_on_exit)
        rng = o.rng or random.Random()
        log_dir = config.path(config.servers.log_dir)
        # The servers it launches (restarts and retunes act on these only), then every
        # server, in the config's order.
        self._launched: dict[str, ManagedServer] = {}
        self.servers: dict[str, SupervisedServer] = {}
        for spec in specs:
            server_log = ServerLog(log_dir / f"{spec.name}.log", o.log_max_bytes,
                                   o.log_backups, o.tail_lines)
            policy = RestartPolicy.from_config(config.servers, random.Random(rng.random()))
            self.servers[spec.name] = self._launched[spec.name] = ManagedServer(
                spec.name, spec.gpus, spec.port, self.live, self._ctx, server_log, policy)
        # Servers it did not launch (servers.attach): the same supervision, never a launch,
        # restart or stop (attached_server.py).
        for target in targets:
            server_log = ServerLog(log_dir / f"{target.name}.log", o.log_max_bytes,
                                   o.log_backups, o.tail_lines)
            self.servers[target.name] = AttachedServer(target, self.live, self._ctx,
                                                       server_log)

    @property
    def config(self) -> JobConfig:
        return self.live.config

    # -- store ------------------------------------------------------------------------------

    async def _store_call(self, method: Callable[..., T], *args: Any) -> T:
        return await self.astore.call(method, *args)

    # -- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Until cancelled. On cancellation every server's process group is stopped."""
        # trust_env=False: an HTTP(S)_PROXY in the environment must never route loopback probes.
        async with httpx.AsyncClient(trust_env=False) as client:
            self._ctx.client = client
            try:
                self._ctx.job_token = await self._job_token()
                to_roll: list[str] = []
                if self.options.cleanup_orphans:
                    to_roll = await self.adopt_or_stop()
                async with anyio.create_task_group() as tg:
                    for server in self.servers.values():
                        tg.start_soon(server.run, name=f"server {server.name}")
                    if to_roll:
                        tg.start_soon(self._roll_adopted, to_roll, name="roll adopted servers")
            finally:
                with anyio.CancelScope(shield=True):
                    for server in self.servers.values():
                        await anyio.to_thread.run_sync(server.log.close)

    async def _job_token(self) -> str:
        """This job's token, made the first time a fleet runs on its state DB."""
        token = await self._store_call(Store.get_setting, Setting.JOB_TOKEN)
        if not token:
            token = secrets.token_hex(16)
            await self._store_call(Store.set_setting, Setting.JOB_TOKEN, token)
        return token

    async def adopt_or_stop(self) -> list[str]:
        """Every server an earlier daemon recorded: adopted when proven this job's and as the
        config wants it (adoption.py), stopped when it is a leftover of ours, left alone when
        it is not proven ours. Returns the adopted servers whose flags differ from the
        config's, for a rolling restart once they serve."""
        records = await self._store_call(Store.server_processes)
        grace = self.config.servers.stop_grace_s
        env = self._ctx.base_env
        to_roll: list[str] = []

        async def one(record: Any) -> None:
            server = self._launched.get(record.name)
            spec = server.spec if server is not None else None
            devices = server_devices(spec, env) if spec is not None else ""
            verdict = await anyio.to_thread.run_sync(
                judge, record, spec, devices, self._ctx.job_token, self.launcher,
                limiter=self._ctx.proc_limiter)
            line = verdict.line(record)
            if verdict.action in (Action.ADOPT, Action.ROLL):
                assert server is not None and verdict.proc is not None
                log.info("%s", line)
                left = [c for c in self.left_in_flight if c.server == record.name]
                server.adopt(verdict.proc, left, roll=verdict.action is Action.ROLL)
                if verdict.action is Action.ROLL:
                    to_roll.append(record.name)
                return
            if verdict.action is Action.FOREIGN:
                log.warning("%s", line)
                await self._store_call(
                    Store.add_event, EventKind.ADOPTION_REFUSED, record.name,
                    {"pid": record.pid, "argv": list(record.argv), "why": verdict.why},
                    "supervisor", self.options.clock())
                # Not ours: never touched, and its record is no use to the next daemon.
                await self._store_call(Store.forget_server_process, record.name)
                return
            if verdict.action is Action.STOP:
                assert verdict.proc is not None
                log.warning("%s", line)
                result = await anyio.to_thread.run_sync(
                    self.launcher.stop, verdict.proc, grace, self.options.kill_wait_s,
                    limiter=self._ctx.proc_limiter)
                await self._store_call(
                    Store.add_event, EventKind.ORPHAN_STOPPED, record.name,
                    {"pgid": verdict.proc.pgid, "pids": [verdict.proc.pid],
                     "why": verdict.why, "result": result, "argv": list(record.argv)},
                    "supervisor", self.options.clock())
                await self._store_call(Store.forget_server_process, record.name)
                return
            await self._stop_orphan(record, grace)

        async with anyio.create_task_group() as tg:
            for record in records:
                tg.start_soon(one, record)
        return sorted(to_roll)

    async def _roll_adopted(self, names: list[str]) -> None:
        """Adopted servers whose flags differ from the config's are replaced one at a time,
        once every server has finished starting (so the roll never takes a slot from one
        that is still loading). Waits for another roll (an operator's) to finish first."""
        targets = [self._launched[n] for n in names]
        limit = self.config.servers.startup_timeout_s + 60.0
        settled = (ServerState.READY, ServerState.BACKOFF, ServerState.FAILED,
                   ServerState.GONE)
        with anyio.move_on_after(limit):
            while not all(s.state in settled for s in self.servers.values()):
                await self.wait_changed()
        while True:
            targets = [s for s in targets if s.adopted_roll_pending]
            if not targets:
                return
            try:
                ticket = self.reserve_roll("rolling restart of adopted servers")
            except RollBusy:
                await anyio.sleep(5.0)
                continue
            with self._holding(ticket, "rolling restart of adopted servers"):
                log.info("rolling restart of %s: adopted with flags that differ from the "
                         "config's", ", ".join(s.name for s in targets))
                await self._roll(targets, "supervisor",
                                 "adopted with flags that differ from the config's")
            return

    async def stop_orphans(self) -> list[str]:
        """Stop the process groups a previous daemon recorded and did not clean up."""
        records = await self._store_call(Store.server_processes)
        stopped: list[str] = []
        grace = self.config.servers.stop_grace_s

        async def one(record: Any) -> None:
            if await self._stop_orphan(record, grace):
                stopped.append(record.name)

        async with anyio.create_task_group() as tg:
            for record in records:
                tg.start_soon(one, record)
        return sorted(stopped)

    async def _stop_orphan(self, record: Any, grace: float) -> bool:
        """Stop what is left of one recorded process group (orphans.py judges what is
        ours); True when something was stopped."""
        verdict, result = await anyio.to_thread.run_sync(
            stop_orphan, record, grace, limiter=self._ctx.proc_limiter)
        if verdict.pids:
            await self._store_call(
                Store.add_event, EventKind.ORPHAN_STOPPED, record.name,
                {"pgid": verdict.pgid, "pids": list(verdict.pids), "why": verdict.why,
                 "result": result, "argv": list(record.argv)},
                "supervisor", self.options.clock())
        else:
            log.info("%s: recorded process group %d: %s", record.name, record.pgid,
                     verdict.why)
        await self._store_call(Store.forget_server_process, record.name)
        return bool(verdict.pids)

    # -- what others see --------------------------------------------------------------------

    def _on_change(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_changed(self) -> None:
        """Returns after the next state change of any server."""
        await self._changed.wait()

    def snapshot(self) -> list[ServerSnapshot]:
        return [s.snapshot() for s in self.servers.values()]

    def recent_log(self, name: str, lines: int = 200) -> list[str]:
        return self._server(name).log.tail(lines)

    def flags(self, name: str) -> dict[str, Any]:
        return dict(self._server(name).servers.flags)

    @property
    def own_servers(self) -> list[ManagedServer]:
        """The servers the daemon launched (restarts and retunes act on these only)."""
        return list(self._launched.values())

    def _own(self, name: str, action: str) -> ManagedServer:
        """The named server, or NotOurs when its kind refuses `action` (an attached one)."""
        why = self._server(name).refusal(action)
        if why is not None:
            raise NotOurs(why)
        return self._launched[name]

    def _server(self, name: str) -> SupervisedServer:
        try:
            return self.servers[name]
        except KeyError:
            raise KeyError(f"no server named {name!r} (have {', '.join(self.servers)})") from None

    # -- operator actions -------------------------------------------------------------------

    @property
    def rolling(self) -> str | None:
        """The roll that runs (or is about to start), if any."""
        return self._roll_ticket.what if self._roll_ticket is not None else None

    def reserve_roll(self, what: str) -> RollTicket:
        """The one "one roll at a time" guard: RollBusy while another roll holds it."""
        if self._roll_ticket is not None:
            raise RollBusy(f"{self._roll_ticket.what} is still running; wait for it to finish")
        self._roll_ticket = RollTicket(what)
        return self._roll_ticket

    def release_roll(self, ticket: RollTicket) -> None:
        """Idempotent: a ticket released twice, or never used, frees the guard once."""
        if self._roll_ticket is ticket:
            self._roll_ticket = None

    @contextmanager
    def _holding(self, ticket: RollTicket | None, what: str) -> Iterator[None]:
        if ticket is None:
            ticket = self.reserve_roll(what)
        elif ticket is not self._roll_ticket:
            raise RollBusy(f"{what}: its reservation was released before it ran")
        try:
            yield
        finally:
            self.release_roll(ticket)

    async def restart(self, name: str | None, actor: str,
                      ticket: RollTicket | None = None) -> RollingResult:
        """Drain, stop and start one server, or all of them one at a time. Returns when done.
        `ticket`: a roll the caller reserved; without one it is reserved here (RollBusy)."""
        with self._holding(ticket, f"restart of {name}" if name else "rolling restart"):
            targets = [self._own(name, "restart")] if name else self.own_servers
            return await self._roll(targets, actor, "restart requested")

    async def retune(self, flags: Mapping[str, Any], name: str | None, actor: str,
                     ticket: RollTicket | None = None, *,
                     flags_checked: bool = False) -> RollingResult:
        """New SGLang flags (None removes one) for one server or all, applied by a rolling
        restart. Flags that are invalid, that would put a server's context length at or
        below the live max tokens (config/live_settings.py), or that the installed SGLang's
        parser refuses (asked here unless the caller just did) stop the roll before its
        first server, with the reason in the result and in the retune's event: the roll runs
        after the operator got an answer, and the check can take longer than a control call
        may wait (SGLang's import)."""
        with self._holding(ticket, f"retune of {name}" if name else "rolling retune"):
            return await self._retune(flags, name, actor, flags_checked)

    async def _retune(self, flags: Mapping[str, Any], name: str | None, actor: str,
                      flags_checked: bool) -> RollingResult:
        targets = [self._own(name, "retune")] if name else self.own_servers
        if not targets:
            return RollingResult((), "*", "no server of the daemon's own to retune (attached "
                                 "servers run the flags their own job gives them)")
        try:
            new = self.live.retuned(flags, [s.name for s in targets])
            if not flags_checked:
                await require_accepted_retune(new.values(), self.options.base_env)
        except ConfigError as exc:
            why = f"{exc}; no server was restarted"
            log.error("retune of %s refused: %s", name or "all servers", why)
            await self._store_call(Store.add_event, EventKind.SERVER_RETUNE, name or "*",
                                   {"flags": dict(flags), "refused": why}, actor,
                                   self.options.clock())
            return RollingResult((), targets[0].name, why)
        await self._store_call(Store.add_event, EventKind.SERVER_RETUNE, name or "*",
                               {"flags": dict(flags)}, actor, self.options.clock())
        if name is None:
            self.live.retune_all(flags)

        def apply(server: ManagedServer) -> None:
            # Applied just before each server's restart: if the new flags do not come up,
            # the roll stops there and the servers not reached keep their working flags.
            self.live.apply_server(server.name, new[server.name])

        return await self._roll(targets, actor, f"retune {dict(flags)}", apply)

    async def reset(self, name: str, actor: str = "operator") -> bool:
        """FAILED → STARTING with a clean failure history; False if it was not FAILED."""
        server = self._own(name, "reset")
        if server.state is not ServerState.FAILED:
            return False
        server.request("reset", actor, "operator reset")
        return True

    async def _roll(self, targets: list[ManagedServer], actor: str, reason: str,
                    prepare: Callable[[ManagedServer], None] | None = None) -> RollingResult:
        done: list[str] = []
        for server in targets:
            if prepare is not None:
                prepare(server)
            ok, why = await server.restart_and_wait(actor, reason)
            if not ok:
                log.warning("%s: %s stopped at this server: %s", server.name, reason, why)
                return RollingResult(tuple(done), server.name, why)
            done.append(server.name)
        return RollingResult(tuple(done))
