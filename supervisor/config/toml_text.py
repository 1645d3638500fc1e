"""A config value written back as TOML text: the demo's config file, and the `[servers.flags]`
lines the tuner and `check` print for an operator to paste into theirs. TOML readers are in
the standard library (tomllib); a writer is not, and these values are only scalars and
lists of them, so this is all it takes."""

from __future__ import annotations

from typing import Any


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
