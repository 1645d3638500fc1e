"""Every module of the daemon, the state store and the TUI imports on its own, first thing in
a fresh interpreter: an import cycle ("partially initialized module") shows up only when the
module inside the cycle is the first one imported, which no other test arranges.

One interpreter imports nothing of the project and forks a child per module, so each child's
import of the project is its first (fork copies only what the parent imported). The parent
imports the heavy third-party libraries first, once, so that each child does not."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("supervisor", "state", "tui")
THIRD_PARTY = ("anyio", "httpx", "httpcore", "starlette.applications", "uvicorn", "textual.app",
               "textual.widgets", "rich.text", "boto3", "botocore", "prometheus_client",
               "psutil", "sqlite_utils", "pynvml")

# Runs in the clean interpreter: for each module name on stdin, a forked child imports it and
# reports the exception in one line; the parent prints the failures.
_CHILD = r"""
import importlib, os, signal, sys
for lib in THIRD_PARTY:
    try:
        importlib.import_module(lib)
    except ImportError:
        pass            # the child that needs it says so
failed = []
for name in sys.stdin.read().split():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        signal.alarm(30)        # an import that hangs fails (SIGALRM) instead of the test
        code = 0
        try:
            __import__(name)
        except BaseException as exc:
            os.write(w, f"{type(exc).__name__}: {exc}".encode()[:2000])
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        message = f.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        failed.append(f"{name}: {message or 'exit status %d' % status}")
print("\n".join(failed))
"""


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__main__":
                continue        # runs its program when imported: that is what it is for
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join(parts))
    return names


def test_the_listing_finds_the_packages() -> None:
    names = _modules()
    assert {"supervisor.contract.status", "state.store", "tui.app",
            "supervisor.control.hub", "supervisor.job.main_loop"} <= set(names)


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, "
                          f"{str(ROOT)!r})\nTHIRD_PARTY = {THIRD_PARTY!r}\n" + _CHILD],
                         input=" ".join(_modules()), capture_output=True, text=True,
                         timeout=110, check=True, cwd=ROOT)
    assert out.stdout.strip() == "", out.stdout


def test_benchmarks_import_nothing_from_tests() -> None:
    # A benchmark's figures must not move when a test helper changes: benchmarks/harness.py
    # is what they run against.
    offenders = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "tests"]
    assert offenders == []
