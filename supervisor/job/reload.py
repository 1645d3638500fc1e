"""`systemctl reload` (SIGHUP): re-read the config file and apply what changed.

reload_plan.py parses, validates and sorts the changes; a refusal touches nothing. Applying
only assigns (everything that can fail was checked while planning): live settings first,
then (in the background, like an operator's retune) the rolling restart for changed server
flags. Each reload, applied or refused, is a `config_reload` audit event listing the changes.
systemd is told RELOADING=1 at the start and READY=1 at the end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import anyio.abc

from state.store import Store
from supervisor.config import ConfigError, JobConfig
from supervisor.config.live_settings import LiveSettings
from supervisor.contract.event_kinds import EventKind
from supervisor.dispatch.dispatcher import Dispatcher
from supervisor.job.reload_plan import SERVER_TIMINGS, ReloadPlan, ReloadRefused, load_for_reload
from supervisor.job.systemd_report import SystemdReport
from supervisor.servers.flag_gate import require_accepted_retune
from supervisor.servers.fleet import Fleet, RollBusy, RollTicket
from supervisor.tune.tuner import Tuner, TuneRefused, start_from_config
from supervisor.uploads.backoff import Backoff
from supervisor.uploads.disk_guard import RESUME_MARGIN, DiskGuard
from supervisor.uploads.uploader import Uploader

log = logging.getLogger("supervisor.job")
MAX_TOKENS = "generation.max_tokens"


class ReloadableJob(Protocol):
    """What a reload reads and changes of the running job (main_loop.Job); the parts not
    started yet are None."""
    reload_lock: anyio.Lock
    systemd: SystemdReport
    reload_config: Callable[[], JobConfig] | None   # reads the file as it was read at start
    file_config: JobConfig                           # the file as last read
    live: LiveSettings                               # the settings every part reads
    dispatcher: Dispatcher | None
    fleet: Fleet | None
    uploader: Uploader | None
    disk_guard: DiskGuard | None
    tuner: Tuner | None
    task_group: anyio.abc.TaskGroup | None           # where a reload's roll runs


async def reload_job(job: ReloadableJob, actor: str) -> str:
    """Returns the outcome's one line (also logged, sent as STATUS= and audited)."""
    async with job.reload_lock:
        job.systemd.reloading()
        event: dict[str, Any]
        try:
            if job.reload_config is None:
                raise ReloadRefused("this job was not started from a config file")
            new, plan = await anyio.to_thread.run_sync(
                load_for_reload, job.reload_config, job.file_config)
            _check_against_live(job.live, new, plan)
            await _require_accepted_flags(job.fleet, new, plan)
            ticket = _reserve_roll(job.fleet, plan)
        except ReloadRefused as exc:
            line = f"reload refused: {exc}"
            log.error("%s (the job goes on with the config it has)", line)
            event = {"result": "refused", "error": str(exc)}
        else:
            try:
                await apply_reload(job, new, plan, actor, job.task_group, ticket)
            except BaseException:
                if ticket is not None and job.fleet is not None:
                    job.fleet.release_roll(ticket)      # its roll never started
                raise
            job.file_config = new
            line = f"reload applied: {plan.summary()}"
            if plan.rolling:
                line += " (rolling restart of the servers)"
            log.warning("%s", line)
            event = {"result": "applied", "rolling_restart": bool(plan.rolling),
                     "changes": {c.key: c.as_json() for c in plan.changes}}
        if job.dispatcher is not None:
            await job.dispatcher.astore.call(Store.add_event, EventKind.CONFIG_RELOAD, "job",
                                             event, actor, time.time())
        job.systemd.reloaded(line)
        return line


def _check_against_live(live: LiveSettings, new: JobConfig, plan: ReloadPlan) -> None:
    """The new file against what is live now (an operator's max tokens, a server's retuned
    flags), not only against the file it replaces."""
    max_tokens = plan.value(MAX_TOKENS) if plan.changed(MAX_TOKENS) else None
    try:
        live.check_reload(new, max_tokens)
    except ConfigError as exc:
        raise ReloadRefused(f"{exc}; nothing applied") from None
    if max_tokens is not None and not plan.rolling:
        try:
            live.check_max_tokens(max_tokens)
        except ValueError as exc:
            raise ReloadRefused(f"generation.max_tokens: {exc}; nothing applied") from None


def _max_tokens_now(live: LiveSettings, plan: ReloadPlan) -> bool:
    """Whether the reload's max tokens applies at once; False when a server still runs with
    a context length it does not fit (the reload's roll raises it: it applies after)."""
    try:
        live.check_max_tokens(plan.value(MAX_TOKENS))
    except ValueError:
        return False
    return True


async def _require_accepted_flags(fleet: Fleet | None, new: JobConfig,
                                  plan: ReloadPlan) -> None:
    # New launch flags go to the installed SGLang's parser before anything is applied: a
    # refusal refuses the reload whole, instead of a roll that stops the first server for
    # flags it cannot start with.
    if fleet is None or not plan.flag_delta():
        return
    try:
        await require_accepted_retune([new.servers], fleet.options.base_env)
    except ConfigError as exc:
        raise ReloadRefused(f"{exc}; nothing applied") from None


def _reserve_roll(fleet: Fleet | None, plan: ReloadPlan) -> RollTicket | None:
    # The fleet's one-roll guard, taken before anything is applied: with an operator's
    # restart or retune rolling, the reload is refused whole instead of queueing its roll.
    if fleet is None or not plan.rolling:
        return None
    try:
        return fleet.reserve_roll("the config reload's rolling restart")
    except RollBusy as exc:
        raise ReloadRefused(f"{exc}; nothing applied") from None


async def apply_reload(job: ReloadableJob, new: JobConfig, plan: ReloadPlan, actor: str,
                       tg: anyio.abc.TaskGroup | None, ticket: RollTicket | None) -> None:
    dispatcher, fleet = job.dispatcher, job.fleet
    # One place takes the new settings; every part reads them there (the dispatcher per
    # request, each server at its next check, the restart policies through a subscription).
    job.live.reload(new, _server_timings(plan))
    after_roll: int | None = None
    if dispatcher is not None and plan.changed(MAX_TOKENS):
        if _max_tokens_now(job.live, plan):
            # Exactly what an operator's max-tokens action does (setting kept, event written).
            await dispatcher.set_max_tokens(plan.value(MAX_TOKENS), actor)
        else:
            after_roll = plan.value(MAX_TOKENS)
            log.warning("reload: max tokens %d applies once the rolling restart has given "
                        "every server its new context length", after_roll)
    _uploads_live(job, new, plan)
    await _tune_live(job, plan, actor, tg)
    if fleet is not None and ticket is not None:
        if tg is None:
            fleet.release_roll(ticket)
        else:
            tg.start_soon(_roll, fleet, plan, actor, ticket, dispatcher, after_roll,
                          name="reload: rolling restart")


async def _tune_live(job: ReloadableJob, plan: ReloadPlan, actor: str,
                     tg: anyio.abc.TaskGroup | None) -> None:
    """`[tune] enabled` turned on starts the search as a job started with it would (worth
    it or not, said in the log and the status); turned off stops a running one, as `ctl
    tune stop` does (the canary goes back to the best flags known)."""
    tuner = job.tuner
    if tuner is None or not plan.changed("tune.enabled"):
        return
    if plan.value("tune.enabled"):
        if tuner.running:
            log.info("reload: [tune] enabled: a search runs already on %s", tuner.canary)
        elif tg is not None:
            await start_from_config(tuner, tg)
    elif tuner.running:
        try:
            await tuner.stop(actor)
        except TuneRefused as exc:      # it ended meanwhile
            log.info("reload: [tune] disabled: %s", exc.reason)
        else:
            log.info("reload: [tune] disabled: the search on %s stopped", tuner.canary)


def _server_timings(plan: ReloadPlan) -> dict[str, Any]:
    return {c.key.split(".", 1)[1]: c.new for c in plan.live
            if c.key.startswith("servers.") and c.key.split(".", 1)[1] in SERVER_TIMINGS}


def _uploads_live(job: ReloadableJob, new: JobConfig, plan: ReloadPlan) -> None:
    u = new.uploads
    uploader = job.uploader
    if uploader is not None and any(c.key.startswith("uploads.") for c in plan.live):
        uploader.reconfigure(concurrency=u.concurrency, keep_local=u.keep_local,
                             backoff=Backoff(u.retry_initial_s, u.retry_max_s),
                             drain_timeout_s=u.drain_timeout_s)
    guard = job.disk_guard
    if guard is not None and plan.changed("uploads.min_free_bytes"):
        guard.min_free_bytes = u.min_free_bytes
        guard.resume_free_bytes = _resume_bytes(u.min_free_bytes)


def _resume_bytes(min_free_bytes: int) -> int:
    return int(min_free_bytes * (1 + RESUME_MARGIN))


async def _roll(fleet: Fleet, plan: ReloadPlan, actor: str, ticket: RollTicket,
                dispatcher: Dispatcher | None = None, max_tokens: int | None = None) -> None:
    delta = plan.flag_delta()
    try:
        if delta:
            result = await fleet.retune(delta, None, actor, ticket, flags_checked=True)
        else:
            result = await fleet.restart(None, actor, ticket)
    finally:
        fleet.release_roll(ticket)
    if result.ok:
        log.info("reload: rolling restart done (%s)", ", ".join(result.restarted))
        if dispatcher is not None and max_tokens is not None:
            try:
                await dispatcher.set_max_tokens(max_tokens, actor)
            except ValueError as exc:
                log.error("reload: max tokens %d not applied after the roll: %s", max_tokens,
                          exc)
    else:
        # The servers not reached keep their working flags (see Fleet.retune).
        log.error("reload: rolling restart stopped at %s: %s", result.aborted_at, result.reason)
