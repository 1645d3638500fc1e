"""Reloading the job's config while it runs (`systemctl reload` → SIGHUP).

The new file is parsed and validated whole first; a file that does not load is refused and
the job goes on with the config it has. Every changed key is then sorted into:
- live: applied at once (generation settings, quality thresholds, dispatch limits, upload
  settings, server timings);
- rolling: applied by restarting the servers one at a time (SGLang flags, and the
  per-server in-flight limit and queue ahead, which size a server's slots when it starts);
- restart-only: what the running job is built on (state, output, prompts, partition, the
  servers themselves). One such key refuses the whole reload, naming the key: nothing
  else is half-applied, and the operator restarts the unit for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from supervisor.config import ConfigError, JobConfig

LIVE = frozenset({
    "generation.max_tokens", "generation.temperature", "generation.top_p",
    "generation.enable_thinking",
    "quality.max_bad_rate", "quality.max_truncation_rate", "quality.min_samples",
    "quality.max_loop_rate", "quality.max_thinking_truncated_rate",
    "dispatch.request_timeout_s", "dispatch.max_attempts", "dispatch.claim_batch",
    "dispatch.stop_grace_s",
    "dispatch.breaker_error_rate", "dispatch.breaker_window", "dispatch.breaker_min_samples",
    # Read per request as it is sent (dispatcher._one).
    "dispatch.stream", "dispatch.stall_s", "dispatch.wait_s", "dispatch.stall_hang_count",
    "dispatch.stall_hang_window_s",
    # Read by each server's saturation guard at its next poll (servers/saturation_watch.py).
    "dispatch.saturation_guard", "dispatch.saturation_floor", "dispatch.saturation_calm_s",
    "dispatch.saturation_collapse_ratio",
    "uploads.concurrency", "uploads.keep_local", "uploads.retry_initial_s",
    "uploads.retry_max_s", "uploads.drain_timeout_s", "uploads.min_free_bytes",
})
# Read by each server from its own copy of [servers] at its next check or life.
SERVER_TIMINGS = frozenset({
    "startup_timeout_s", "health_interval_s", "health_timeout_s", "health_failures",
    "hang_timeout_s", "stop_grace_s", "drain_timeout_s", "backoff_initial_s", "backoff_max_s",
    "max_failures", "failure_window_s", "max_unserved_failures", "max_brief_failures",
    "served_after_s",
})
ROLLING_PREFIXES = ("servers.flags.",)
ROLLING = frozenset({"dispatch.max_in_flight_per_server", "dispatch.queue_ahead"})


@dataclass(frozen=True)
class Change:
    key: str          # dotted, e.g. "generation.max_tokens", "servers.flags.mem-fraction-static"
    old: Any
    new: Any

    def as_json(self) -> list[Any]:
        return [_plain(self.old), _plain(self.new)]


@dataclass(frozen=True)
class ReloadPlan:
    live: tuple[Change, ...]
    rolling: tuple[Change, ...]

    @property
    def changes(self) -> tuple[Change, ...]:
        return self.live + self.rolling

    def value(self, key: str) -> Any:
        return next(c.new for c in self.changes if c.key == key)

    def changed(self, key: str) -> bool:
        return any(c.key == key for c in self.changes)

    def flag_delta(self) -> dict[str, Any]:
        """Flags to retune: new values, None for a removed flag."""
        return {c.key[len("servers.flags."):]: c.new for c in self.rolling
                if c.key.startswith("servers.flags.")}

    def summary(self) -> str:
        if not self.changes:
            return "no changes"
        return ", ".join(f"{c.key} {_short(c.old)} -> {_short(c.new)}" for c in self.changes)


class ReloadRefused(ValueError):
    """The new config cannot be applied to the running job; the message says why."""


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _short(value: Any) -> str:
    return "(unset)" if value is None else repr(_plain(value))


def diff(old: JobConfig, new: JobConfig) -> list[Change]:
    """Every leaf key whose value differs, sections in the config's order; servers.flags
    compared flag by flag (None for a flag that is not set)."""
    out: list[Change] = []
    for section in fields(old):
        if section.name == "base_dir":
            continue
        a, b = getattr(old, section.name), getattr(new, section.name)
        if not is_dataclass(a):
            if a != b:
                out.append(Change(section.name, a, b))
            continue
        for f in fields(a):
            key = f"{section.name}.{f.name}"
            va, vb = getattr(a, f.name), getattr(b, f.name)
            if isinstance(va, Mapping) and isinstance(vb, Mapping):
                for name in [*va, *(n for n in vb if n not in va)]:
                    if va.get(name) != vb.get(name):
                        out.append(Change(f"{key}.{name}", va.get(name), vb.get(name)))
            elif va != vb:
                out.append(Change(key, va, vb))
    return out


def kind_of(key: str) -> str:
    """'live', 'rolling' or 'restart'."""
    if key in LIVE:
        return "live"
    section, _, name = key.partition(".")
    if section == "servers" and name in SERVER_TIMINGS:
        return "live"
    # The tuner reads [tune] at each window and trial (tune/tuner.py); `enabled` starts or
    # stops the search as `ctl tune start/stop` would (reload.py).
    if section == "tune":
        return "live"
    if key in ROLLING or key.startswith(ROLLING_PREFIXES):
        return "rolling"
    # Anything not known to be safe (including sections added later) needs a restart.
    return "restart"


def plan_reload(old: JobConfig, new: JobConfig) -> ReloadPlan:
    """Raises ReloadRefused naming every restart-only key that changed."""
    changes = diff(old, new)
    restart = [c.key for c in changes if kind_of(c.key) == "restart"]
    if restart:
        keys = ", ".join(restart)
        raise ReloadRefused(f"{keys}: only changes with a restart (systemctl restart "
                            f"dflash-supervisor); nothing applied")
    plan = ReloadPlan(tuple(c for c in changes if kind_of(c.key) == "live"),
                      tuple(c for c in changes if kind_of(c.key) == "rolling"))
    if plan.changed("generation.max_tokens"):
        _check_max_tokens(plan.value("generation.max_tokens"), new)
    return plan


def _check_max_tokens(value: int, new: JobConfig) -> None:
    # The dispatcher refuses a limit SGLang would 400 on every request; refusing it here,
    # before anything is applied, keeps the reload all or nothing.
    context = new.servers.context_length
    if context is not None and value >= context:
        raise ReloadRefused(f"generation.max_tokens: {value} is not below the servers' "
                            f"context length ({context}); nothing applied")


def load_for_reload(load: Callable[[], JobConfig], current: JobConfig
                    ) -> tuple[JobConfig, ReloadPlan]:
    """Re-read the config (`load`: the same reading the daemon started with), validate and
    plan; every refusal is ReloadRefused with one line."""
    try:
        new = load()
    except ConfigError as exc:
        raise ReloadRefused(f"invalid config: {exc}; nothing applied") from None
    return new, plan_reload(current, new)
