"""What a server unit runs: the spec file the daemon writes before it starts
`dflash-sglang@NAME.service`, and `serve-server` reads to exec the server.

systemd cannot take an argv and an environment per start (the template is fixed text, and the
daemon's user may not write unit files), so the daemon puts them in a file under its state
directory, beside which the unit looks by name (`%S/dflash-supervisor/servers/%i.json`). The
file is written whole (a temporary file renamed over it), so a unit never reads half of one.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Bumped when a field changes meaning; serve-server refuses a version it does not know.
SPEC_VERSION = 1


class SpecError(ValueError):
    """A spec file that is missing or malformed: the message names the file and the problem."""


@dataclass(frozen=True)
class UnitSpec:
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    log_path: str = ""      # "" = leave the output to the unit (the journal)
    cwd: str | None = None

    def to_json(self) -> str:
        return json.dumps({"version": SPEC_VERSION, "name": self.name, "argv": list(self.argv),
                           "env": dict(self.env), "log_path": self.log_path, "cwd": self.cwd},
                          indent=1, sort_keys=True)


def spec_path(spec_dir: Path, name: str) -> Path:
    return spec_dir / f"{name}.json"


def exit_path(spec: Path) -> Path:
    """Where the unit's ExecStopPost records how the server ended, beside its spec."""
    return spec.with_name(spec.name.removesuffix(".json") + ".exit.json")


@dataclass(frozen=True)
class UnitExit:
    """How one invocation of a server unit ended, from systemd's ExecStopPost variables.
    Recorded in a file because systemd forgets: a unit that ended cleanly is unloaded at
    once, and its ExecMainStatus with it."""

    invocation: str     # the unit's INVOCATION_ID: which start this exit belongs to
    result: str         # $SERVICE_RESULT: success, exit-code, signal, core-dump, oom-kill ...
    code: str           # $EXIT_CODE: exited, killed, dumped ("" when it never ran)
    status: str         # $EXIT_STATUS: a number, or a signal name (TERM, KILL)

    @property
    def returncode(self) -> int | None:
        """As Popen says it: the exit code, or minus the signal number."""
        if self.code == "exited" and self.status.lstrip("-").isdigit():
            return int(self.status)
        if self.code in ("killed", "dumped"):
            if self.status.isdigit():
                return -int(self.status)
            try:
                return -int(signal.Signals[f"SIG{self.status}"])
            except (KeyError, ValueError):
                return None
        return None


def write_exit(path: Path, unit_exit: UnitExit) -> None:
    _write_atomically(path, json.dumps(asdict(unit_exit)))


def read_exit(path: Path) -> UnitExit | None:
    """None when there is no record, or it is not readable as one."""
    try:
        raw = json.loads(path.read_text())
        return UnitExit(str(raw["invocation"]), str(raw["result"]), str(raw["code"]),
                        str(raw["status"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_spec(spec_dir: Path, spec: UnitSpec) -> Path:
    """Atomically (a rename), readable by the owner only: the environment holds the job's
    token. Blocking."""
    spec_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = spec_path(spec_dir, spec.name)
    _write_atomically(target, spec.to_json())
    return target


def _write_atomically(target: Path, text: str) -> None:
    # mkstemp's file is 0600: the spec's environment holds the job's token.
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_spec(path: Path) -> UnitSpec:
    try:
        raw: Any = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file (the daemon writes it before it starts "
                        "the unit; start servers through dflash-supervisor)") from None
    except (OSError, ValueError) as exc:
        raise SpecError(f"{path}: unreadable spec file: {exc}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: not a JSON object")
    if raw.get("version") != SPEC_VERSION:
        raise SpecError(f"{path}: spec version {raw.get('version')!r}, this dflash-supervisor "
                        f"reads {SPEC_VERSION}")
    argv, env = raw.get("argv"), raw.get("env", {})
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        raise SpecError(f"{path}: argv must be a non-empty list of strings")
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str)
                                          for k, v in env.items())):
        raise SpecError(f"{path}: env must map strings to strings")
    name, log_path, cwd = raw.get("name"), raw.get("log_path", ""), raw.get("cwd")
    if not isinstance(name, str) or not isinstance(log_path, str) or not (
            cwd is None or isinstance(cwd, str)):
        raise SpecError(f"{path}: name and log_path must be strings, cwd a string or null")
    return UnitSpec(name, tuple(argv), env, log_path, cwd)
