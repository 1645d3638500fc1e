"""SGLang flags as an operator types them in the retune dialog: `name=value ...`."""

from __future__ import annotations

import shlex

from supervisor.client.flag_space import scalar
from supervisor.contract.status import Flag, FlagValue


class FlagSyntaxError(ValueError):
    """A one-line reason, shown under the input."""


def parse_value(text: str) -> FlagValue | None:
    """`64` → 64, `0.85` → 0.85, `true` → a bare switch, empty → remove the flag,
    `'1 2 4 8'` → a repeated value (--cuda-graph-bs 1 2 4 8), else text."""
    if text == "":
        return None
    if len(text.split()) > 1:
        return tuple(scalar(word) for word in text.split())
    return scalar(text)


def parse_flags(text: str) -> dict[str, FlagValue | None]:
    """`mem-fraction-static=0.85 --max-running-requests=48 cuda-graph-max-bs=` →
    {"mem-fraction-static": 0.85, "max-running-requests": 48, "cuda-graph-max-bs": None}."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise FlagSyntaxError(f"cannot split {text!r}: {exc}") from None
    if not words:
        raise FlagSyntaxError("no flags given: type name=value (an empty value removes it)")
    out: dict[str, FlagValue | None] = {}
    for word in words:
        name, sep, value = word.partition("=")
        name = name.lstrip("-")
        if not sep or not name:
            raise FlagSyntaxError(f"{word!r}: expected name=value")
        if name in out:
            raise FlagSyntaxError(f"{name}: given twice")
        out[name] = parse_value(value)
    return out


def show_value(value: FlagValue | None) -> str:
    if value is None:
        return "(removed)"
    if value is True:
        return "(switch)"
    if isinstance(value, tuple):
        return " ".join(show_value(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def show_flags(flags: tuple[Flag, ...]) -> str:
    return "\n".join(f"--{f.name} {show_value(f.value)}" for f in flags) or "(no flags)"
