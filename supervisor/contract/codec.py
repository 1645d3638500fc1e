"""JSON <-> frozen dataclass records, driven by the records' type hints. Standard library only.

Strict where it matters (a wrong type or a missing required field is a ContractError naming
the field), lenient where versions meet: unknown fields are ignored and missing fields that
have defaults take them, so an older client reads a newer daemon's snapshot and the reverse.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")


class ContractError(ValueError):
    """Data that does not fit the contract; the message names the field."""


def to_plain(value: Any) -> Any:
    """A record (or anything inside one) as JSON-ready lists, dicts and scalars."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [to_plain(v) for v in value]
    return value


def dumps(value: Any) -> str:
    # allow_nan=False: NaN/Infinity are not JSON; a record holding one is a bug to see early.
    return json.dumps(to_plain(value), ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)


def loads(cls: type[T], text: str | bytes) -> T:
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ContractError(f"not JSON: {exc}") from None
    return from_plain(cls, data)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_plain(cls: type[T], data: Any, where: str = "") -> T:
    return _convert(cls, data, where or cls.__name__)


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _union(typing.get_args(tp), value, where)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list):
            raise ContractError(f"{where}: expected a list, got {_kind(value)}")
        item = args[0]
        return tuple(_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _record(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in tp)
            raise ContractError(f"{where}: {value!r} is not one of {allowed}") from None
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        # JSON writes 3.0 as 3 in some encoders; an int is a fine float, a bool is not.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is type(None):
        if value is None:
            return None
    else:
        raise ContractError(f"{where}: unsupported type {tp!r} in the contract")
    raise ContractError(f"{where}: expected {getattr(tp, '__name__', tp)}, got {_kind(value)}")


def _union(options: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None:
        if type(None) in options:
            return None
        raise ContractError(f"{where}: must not be null")
    # Exact JSON types first, so 3 stays an int in `int | float | str | bool`.
    for tp in options:
        if tp is type(None):
            continue
        if tp in (bool, int, str) or tp is float and isinstance(value, float):
            try:
                return _convert(tp, value, where)
            except ContractError:
                continue
    for tp in options:
        if tp is type(None) or tp in (bool, int, str):
            continue
        try:
            return _convert(tp, value, where)
        except ContractError:
            continue
    names = " | ".join(getattr(t, "__name__", str(t)) for t in options)
    raise ContractError(f"{where}: expected {names}, got {_kind(value)}")


def _record(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise ContractError(f"{where}: expected an object, got {_kind(value)}")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in value:
            kwargs[f.name] = _convert(hints[f.name], value[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ContractError(f"{where}.{f.name}: missing")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ContractError(f"{where}: {exc}") from None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


class Record:
    """Mixin for contract records: `to_json()` and `Cls.from_json(text)`."""

    def to_json(self) -> str:
        return dumps(self)

    @classmethod
    def from_json(cls: type[T], text: str | bytes) -> T:
        return loads(cls, text)

    @classmethod
    def from_plain(cls: type[T], data: Any) -> T:
        return from_plain(cls, data)
