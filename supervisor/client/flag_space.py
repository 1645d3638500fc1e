"""SGLang flag values and the tuner's search space as an operator types them.

A value is typed the way the retune dialog types it (`64` an int, `0.85` a float, `true`/
`false` a switch, anything else text); the search space is `FLAG=V1,V2,...` per flag, the
values in the order the tuner tries them: `max-running-requests=32,48,64`. `ctl tune start
--space` and the TUI's start dialog read it here, so both say the same of a bad spec.
Standard library only (the TUI imports it through the client)."""

from __future__ import annotations

import shlex

from supervisor.contract.status import FlagScalar, FlagValue
from supervisor.contract.tuning import FlagRange


class SpaceSyntaxError(ValueError):
    """A one-line reason that names the spec it refuses."""


def scalar(text: str) -> FlagScalar:
    low = text.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_range(spec: str) -> FlagRange:
    """`max-running-requests=32,48,64` (leading dashes allowed) → FlagRange with [32, 48, 64]."""
    name, sep, values = spec.partition("=")
    name = name.strip().lstrip("-")
    if not sep or not name:
        raise SpaceSyntaxError(f"{spec!r}: expected FLAG=V1,V2,... "
                               "(e.g. max-running-requests=32,48,64)")
    words = [v.strip() for v in values.split(",")]
    if not values.strip() or any(not w for w in words):
        raise SpaceSyntaxError(f"{spec!r}: an empty value in the list for {name}")
    typed = tuple(scalar(w) for w in words)
    if len({(type(v), v) for v in typed}) < len(typed):
        raise SpaceSyntaxError(f"{spec!r}: a value given twice for {name}")
    return FlagRange(name, typed)


def join_space(ranges: list[FlagRange] | tuple[FlagRange, ...]) -> tuple[FlagRange, ...]:
    """The ranges as one space; a flag named twice is refused rather than silently merged."""
    seen: set[str] = set()
    for r in ranges:
        if r.name in seen:
            raise SpaceSyntaxError(f"{r.name}: given twice in the search space")
        seen.add(r.name)
    return tuple(ranges)


def parse_space(text: str) -> tuple[FlagRange, ...]:
    """Several specs separated by spaces (the TUI's one field); empty → () (the daemon's
    default space)."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise SpaceSyntaxError(f"cannot split {text!r}: {exc}") from None
    return join_space([parse_range(w) for w in words])


def space_text(space: tuple[FlagRange, ...]) -> str:
    """The inverse of parse_space, for lines that echo what was asked."""
    def word(v: FlagValue) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)
    return " ".join(f"{r.name}={','.join(word(v) for v in r.values)}" for r in space)
