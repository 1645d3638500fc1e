"""The load benchmark's smoke run (`benchmarks/bench_load.py --quick`), so it cannot rot: the
daemon on the load-faithful simulator at 8,192 and 32,768 max tokens and with one server's
scheduler stuck. The benchmark exits 1 when any of its targets is missed (a restart, a
stall abort, goodput under 0.98, a late hang verdict, a prompt lost or doubled)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_bench_load_quick_meets_its_targets(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_load.py"),
                          "--quick", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=840, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    lines = out.stdout.splitlines()
    table = lines[lines.index(next(l for l in lines if l.startswith("run "))):]
    assert [row.split()[0] for row in table[1:4]] == ["8192", "32768", "stall"], table
    assert all(row.rstrip().endswith("ok") for row in table[1:4]), table
