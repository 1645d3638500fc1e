"""The job's settings as they are now: the one owner every reader asks.

Four ways change a running job's settings: an operator's max-tokens action (the socket, `ctl`,
the TUI's key), a retune of server flags (one server or all, by a rolling restart), a config
reload (SIGHUP), and the max tokens saved in the state DB by an earlier run. Before this
owner, the job, the dispatcher, the fleet and the state backup each kept a copy of the
config, and each path updated some copies only: a retune of `context-length` reached the
fleet's copy and not the dispatcher's, which then accepted a max tokens SGLang would refuse
on every request. Now the copies are gone: readers hold this object and read `config`,
`server(name)` and `max_tokens` when they need them, and every change goes through a method
here that checks it against everything else that is live.

The checks across settings live here because only here are all of them in view:
max tokens must stay below the smallest context length any server runs with (SGLang answers
400 to a request whose prompt plus max_tokens reaches it), whichever of the two changes.

Changes that others must act on (a quality gate's thresholds, a restart policy's budget) are
announced to subscribers, synchronously, after the change is in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from supervisor.config.load import with_flags
from supervisor.config.sections import ConfigError, JobConfig, ServersSection

Listener = Callable[[JobConfig], None]


class LiveSettings:
    def __init__(self, config: JobConfig, server_names: Iterable[str] = ()) -> None:
        self._config = config
        # Each server's own [servers] section: a retune of one server changes its flags only.
        self._servers: dict[str, ServersSection] = {n: config.servers for n in server_names}
        self._max_tokens = config.generation.max_tokens
        self._listeners: list[Listener] = []

    # -- reading --------------------------------------------------------------------------

    @property
    def config(self) -> JobConfig:
        """The job-wide config as it is now (a reload replaces it, a retune of every server
        merges its flags in). Its generation.max_tokens is the file's: the live value is
        `max_tokens`."""
        return self._config

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def server(self, name: str) -> ServersSection:
        """`name`'s own [servers] section (its flags possibly retuned alone)."""
        return self._servers.get(name, self._config.servers)

    def add_server(self, name: str) -> None:
        self._servers.setdefault(name, self._config.servers)

    @property
    def context_length(self) -> int | None:
        """The smallest --context-length any server runs with or is about to (a roll in
        progress holds old and new); None where none sets one."""
        lengths = [s.context_length for s in (self._config.servers, *self._servers.values())]
        known = [n for n in lengths if n is not None]
        return min(known) if known else None

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # -- checks -----------------------------------------------------------------------------

    def check_max_tokens(self, value: Any) -> int:
        """`value` as a max tokens every server can serve; ValueError saying why not."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {value!r}")
        context = self.context_length
        if context is not None and value >= context:
            raise ValueError(f"max_tokens {value} is not below the servers' context length "
                             f"({context}): SGLang would refuse every request")
        return value

    def check_continuation(self, max_tokens: int, longest_prompt: int) -> None:
        """Continuing truncated answers up to `max_tokens`: SGLang checks a request's input
        plus its max new tokens against the context length, and a continuation's input is
        the prompt and the tokens kept, its max new tokens the rest up to `max_tokens`, so
        the longest prompt (`longest_prompt` tokens) plus `max_tokens` must fit. ValueError
        with the numbers otherwise."""
        context = self.context_length
        if context is not None and longest_prompt + max_tokens > context:
            raise ValueError(
                f"continue: the longest truncated prompt has {longest_prompt:,} tokens; with "
                f"max tokens {max_tokens:,} that is {longest_prompt + max_tokens:,}, over the "
                f"servers' context length ({context:,})")

    def _check_context(self, sections: Iterable[ServersSection], max_tokens: int,
                       what: str) -> None:
        for s in sections:
            context = s.context_length
            if context is not None and max_tokens >= context:
                raise ConfigError(
                    f"{what}: context-length {context} is not above the live max tokens "
                    f"({max_tokens}); SGLang would refuse every request (lower max tokens "
                    f"first)")

    # -- changing ---------------------------------------------------------------------------

    def set_max_tokens(self, value: Any) -> int:
        """The new live max tokens (checked); returns the old one."""
        value = self.check_max_tokens(value)
        old, self._max_tokens = self._max_tokens, value
        return old

    def restore_max_tokens(self, value: int) -> None:
        """The value an earlier run saved in the state DB: taken as it was (it was checked
        when it was set; a config since changed is checked at load against the file's)."""
        self._max_tokens = value

    def retuned(self, flags: Mapping[str, Any], names: Iterable[str]) -> dict[str, ServersSection]:
        """Each named server's section with `flags` merged in (None removes one), checked
        alone and against the live max tokens; nothing applied (a roll applies each just
        before its server restarts, `apply_server`). ConfigError saying why not."""
        out: dict[str, ServersSection] = {}
        for name in names:
            out[name] = with_flags(replace(self._config, servers=self.server(name)),
                                   flags).servers
        self._check_context(out.values(), self._max_tokens, "retune")
        return out

    def retune_all(self, flags: Mapping[str, Any]) -> None:
        """A retune of every server: the job-wide section takes the flags too, so a server
        started later (a reset) starts with them."""
        new = with_flags(self._config, flags)
        self._check_context([new.servers], self._max_tokens, "retune")
        self._config = new
        self._announce()

    def apply_server(self, name: str, section: ServersSection) -> None:
        self._servers[name] = section

    def check_reload(self, new: JobConfig, max_tokens: int | None) -> None:
        """A reload's config against what is live: `max_tokens` is the max tokens the reload
        sets (None: it keeps the live one). ConfigError saying why not."""
        keep = self._max_tokens if max_tokens is None else max_tokens
        self._check_context([new.servers], keep, "reload: servers.flags")

    def reload(self, new: JobConfig, timings: Mapping[str, Any]) -> None:
        """A reload's config becomes the job's; each server keeps its own flags (possibly
        retuned from the socket) and takes the reload's live timings. Flags that changed
        reach each server through the reload's roll (`apply_server`)."""
        self._config = new
        for name, section in self._servers.items():
            self._servers[name] = replace(section, **timings)
        self._announce()

    def _announce(self) -> None:
        for listener in self._listeners:
            listener(self._config)
