"""Thinking on, servers attached: each attached server needs a reasoning parser of its own.

`[servers.flags]` is never applied to an attached server (it runs its own job's arguments),
so the config cannot say whether one separates the thinking; its `/server_info` can: SGLang
echoes its arguments there, `reasoning_parser` among them. Without one SGLang 0.5.23 returns
the thinking inside `content`, <think> tags and all (config/checks.py says why that is refused
rather than warned), so a server that says it has none stops the start, named. A server not
answering yet (a Slurm job of its own, still loading) is not refused for what it has not
said: one warning, and the quality gate's missing-reasoning check watches its answers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from supervisor.config import ConfigError, JobConfig
from supervisor.config.attach_urls import attach_targets
from supervisor.sglang.server_info import read_server_info_now, reasoning_parser_of

log = logging.getLogger("supervisor.servers")

INFO_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class AttachedParser:
    name: str
    url: str
    parser: str | None
    unread: str = ""            # why its /server_info did not say; "" when it did

    def line(self) -> str:
        if self.unread:
            return (f"{self.name} ({self.url}): reasoning parser not checked: {self.unread} "
                    "(the quality gate watches its answers for missing reasoning)")
        if self.parser is None:
            return f"{self.name} ({self.url}): no reasoning parser (its /server_info says null)"
        return f"{self.name} ({self.url}): reasoning parser {self.parser} (its /server_info)"


def attached_parsers(cfg: JobConfig, timeout_s: float = INFO_TIMEOUT_S) -> list[AttachedParser]:
    """Each attached server's reasoning parser, when thinking is on (else nothing to ask)."""
    if not cfg.generation.enable_thinking:
        return []
    found = []
    for target in attach_targets(cfg.servers.attach):
        info, why = read_server_info_now(target.url, timeout_s)
        parser, unsaid = reasoning_parser_of(info) if info is not None else (None, why)
        found.append(AttachedParser(target.name, target.url, parser, unsaid))
    return found


def refusal(found: list[AttachedParser]) -> str | None:
    """One line naming every attached server that says it runs no reasoning parser."""
    without = [f for f in found if f.parser is None and not f.unread]
    if not without:
        return None
    names = ", ".join(f"{f.name} ({f.url})" for f in without)
    return (f"generation.enable_thinking = true, but attached server {names} runs without a "
            "reasoning parser (its /server_info says reasoning_parser null): SGLang would "
            "return the thinking inside content with its <think> tags; restart it with "
            "--reasoning-parser (the model's, e.g. qwen3), or set "
            "generation.enable_thinking = false")


def require_attached_parsers(cfg: JobConfig) -> None:
    """At start: ConfigError for a server without a parser; a warning for one not answering."""
    found = attached_parsers(cfg)
    problem = refusal(found)
    if problem is not None:
        raise ConfigError(problem)
    for f in found:
        if f.unread:
            log.warning("%s", f.line())
