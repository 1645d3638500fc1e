"""The launch flags put to the installed SGLang's own argument parser before any launch.

SGLang renames flags between releases (`--cuda-graph-max-bs` is gone in 0.5.23: only
`--cuda-graph-max-bs-decode` / `-prefill` remain, and argparse calls the old name
"ambiguous"). A flag it does not take makes every server exit 2 at start; finding that out
from eight crash loops is minutes lost at best. So the daemon asks SGLang's parser first:
the same `ServerArgs.add_cli_args` on an `argparse.ArgumentParser(prog="sglang serve")` that
`prepare_server_args` builds (`sglang/srt/server_args.py`), in a child process of the
interpreter that runs the servers, so abbreviations, choices and value types are judged
exactly as at launch -- a `--help` text only lists names.

Only a launch command of SGLang's own shape is checked (`<python> -m sglang.launch_server`,
or `sglang serve`); a wrapper script or the simulator is not, and neither is anything where
that interpreter has no SGLang: those are not checked, and the verdict says why. What the
daemon does with a verdict is supervisor/servers/flag_gate.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# The child's exit status when its interpreter cannot import SGLang at all.
NOT_INSTALLED = 17
_OPTIONS_MARK = "dflash-sglang-options "

# Run as `<python> -c PARSER_CHECK <args...>`: exit 0 accepted, 2 refused (argparse's
# "usage: ... / sglang serve: error: ..." on stderr), NOT_INSTALLED without SGLang. Plugins
# load first, as `python -m sglang.launch_server` loads them before parsing.
PARSER_CHECK = f"""
import argparse, json, sys
try:
    from sglang.srt.server_args import ServerArgs
except ModuleNotFoundError as exc:
    if (exc.name or "").split(".")[0] == "sglang":
        sys.exit({NOT_INSTALLED})
    raise
try:
    from sglang.srt.plugins import load_plugins
except ImportError:
    pass
else:
    load_plugins()
parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
names = sorted({{o for a in parser._actions for o in a.option_strings if o.startswith("--")}})
print({_OPTIONS_MARK!r} + json.dumps(names), flush=True)
parser.parse_args(sys.argv[1:])
"""

Runner = Callable[..., subprocess.CompletedProcess]


@dataclass(frozen=True)
class FlagVerdict:
    """`accepted` True: SGLang's parser took every flag; False: it refused them (`detail`
    is argparse's error line); None: not checked (`detail` says why)."""

    accepted: bool | None
    detail: str
    options: tuple[str, ...] = ()       # every --option the parser knows, for suggestions

    @property
    def refused(self) -> bool:
        return self.accepted is False


def _shebang_python(script: str) -> str | None:
    path = shutil.which(script)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if parts and Path(parts[0]).name == "env":
        parts = parts[1:]
    return parts[0] if parts and Path(parts[0]).name.startswith("python") else None


def sglang_launcher(command: Sequence[str]) -> tuple[str, list[str]] | None:
    """(the interpreter that runs SGLang, the command's own leading arguments) for a launch
    command of SGLang's shape, else None."""
    cmd = list(command)
    if (len(cmd) >= 3 and Path(cmd[0]).name.startswith("python") and cmd[1] == "-m"
            and cmd[2] == "sglang.launch_server"):
        return cmd[0], cmd[3:]
    if len(cmd) >= 2 and Path(cmd[0]).name == "sglang" and cmd[1] == "serve":
        python = _shebang_python(cmd[0])
        return (python, cmd[2:]) if python is not None else None
    return None


def argparse_error(text: str) -> str | None:
    """argparse's one error line ("sglang serve: error: unrecognized arguments: --x") in a
    program's output, or None."""
    for line in reversed(text.splitlines()):
        if ": error: " in line:
            return line.strip()
    return None


def parser_verdict(command: Sequence[str], args: Sequence[str], flags: int,
                   env: Mapping[str, str] | None = None, timeout_s: float = 300.0,
                   runner: Runner = subprocess.run) -> FlagVerdict:
    """What SGLang's parser says of `args`, the launch line after `command` (`flags`: how
    many the job set, for the message). Blocking (SGLang imports torch: seconds to a
    minute); call it off the event loop."""
    found = sglang_launcher(command)
    if found is None:
        return FlagVerdict(None, f"launch command {command[0]!r} is not SGLang's "
                                 "launcher (python -m sglang.launch_server or sglang serve)")
    python, leading = found
    try:
        out = runner([python, "-c", PARSER_CHECK, *leading, *args], capture_output=True, text=True,
                     timeout=timeout_s, stdin=subprocess.DEVNULL,
                     env=dict(os.environ if env is None else env))
    except FileNotFoundError:
        return FlagVerdict(None, f"{python!r} not found")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return FlagVerdict(None, f"SGLang's parser could not be run: {exc}")
    options: tuple[str, ...] = ()
    for line in out.stdout.splitlines():
        if line.startswith(_OPTIONS_MARK):
            try:
                options = tuple(json.loads(line[len(_OPTIONS_MARK):]))
            except ValueError:
                pass
    if out.returncode == 0:
        return FlagVerdict(True, f"SGLang's parser ({python}) accepts all {flags} flags",
                           options)
    if out.returncode == NOT_INSTALLED:
        return FlagVerdict(None, f"SGLang is not installed for {python}")
    error = argparse_error(out.stderr)
    if out.returncode == 2 and error is not None:
        return FlagVerdict(False, error, options)
    tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
    return FlagVerdict(None, f"SGLang's parser exited with {out.returncode}: {tail[-300:]}")
