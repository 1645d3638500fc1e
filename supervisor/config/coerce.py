"""One TOML table to one section: every key known, every value checked against its field's
type, the key's dotted path in each refusal."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from supervisor.config.sections import ConfigError, Partition


def _coerce(key: str, value: Any, annotation: str) -> Any:
    """Check one value against its field's annotation (annotations are strings here)."""
    ann = annotation.replace(" ", "")
    optional = ann.endswith("|None")
    if optional:
        if value is None:
            return None
        ann = ann[: -len("|None")]
    if ann == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if ann == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if ann == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        # TOML has nan and inf; no setting here means anything with them (an infinite
        # timeout passes "> 0" and then crashes the first sleep or deadline computed from it).
        if not math.isfinite(value):
            raise ConfigError(f"{key}: must be a finite number, got {value!r}")
        return float(value)
    if ann == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if ann == "Partition":
        if value == "auto":
            # Resolved by parse_config, which knows the environment and partition_count.
            return value
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected \"I/N\" as a string, got {value!r}")
        return Partition.parse(value, key)
    if ann == "tuple[int,...]":
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise ConfigError(f"{key}: expected a list of integers, got {value!r}")
        return tuple(value)
    if ann == "tuple[str,...]" and key == "servers.attach":
        # Empty is fine (no attached servers); each entry is judged by attach_urls.py,
        # which names the entry and what is wrong with it.
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list of URLs like [\"http://node7:30000\"], "
                              f"got {value!r}")
        return tuple(value)
    if ann == "tuple[str,...]":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a non-empty list of strings, got {value!r}")
        return tuple(value)
    if ann == "Mapping[str,Any]":
        return coerce_flags(key, value)
    raise AssertionError(f"no coercion for {annotation}")


def coerce_flags(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a table of SGLang flags, got {value!r}")
    out: dict[str, Any] = {}
    for name, v in value.items():
        if name.startswith("-"):
            raise ConfigError(f"{key}.{name}: write flag names without the leading dashes")
        if isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v)):
            raise ConfigError(f"{key}.{name}: a flag value is a string, number, boolean or list")
        out[name] = v
    return out


def owners_of(key: str, sections: Mapping[str, type]) -> list[str]:
    """The sections that have a key of this name (where a misplaced key belongs)."""
    return [name for name, cls in sections.items() if key in {f.name for f in fields(cls)}]


def build_section(name: str, cls: type, raw: Any,
                  sections: Mapping[str, type] | None = None) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"[{name}]: expected a table")
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            # A key under the wrong header is the usual TOML slip: every key after a
            # [table] line belongs to that table until the next one. Say where it goes.
            owners = owners_of(key, sections or {})
            if owners:
                where = " or ".join(f"[{o}] ({o}.{key})" for o in owners)
                raise ConfigError(f"{name}.{key}: unknown key in [{name}]; {key} belongs in "
                                  f"{where}: move it under that table's header")
            allowed = ", ".join(sorted(known))
            raise ConfigError(f"{name}.{key}: unknown key (allowed: {allowed})")
        kwargs[key] = _coerce(f"{name}.{key}", value, str(known[key].type))
    return cls(**kwargs)

