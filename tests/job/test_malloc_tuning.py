"""The daemon's malloc settings (supervisor/job/malloc_tuning.py) give shard-sized buffers
back when they are freed. Measured on real processes: the same allocation pattern (a big
buffer freed once, then shard-sized buffers each freed with a small block kept above it),
with and without the settings, anonymous RSS before and after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PATTERN = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})


def rss_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024


if {tuned!r}:
    from supervisor.job.malloc_tuning import tune_malloc
    assert tune_malloc()
kept = []
first = bytes(8 << 20)      # freed: glibc would raise its mmap threshold to 8 MB
del first
before = rss_mb()
for _ in range(20):
    buf = bytearray(6 << 20)                # a shard's worth of answers
    buf[::4096] = bytes(len(buf[::4096]))   # every page touched: resident
    kept.append(bytes(2000))                # a small block above it, still alive
    del buf
print(rss_mb() - before)
"""


def _grown_mb(tuned: bool) -> float:
    out = subprocess.run([sys.executable, "-c", PATTERN.format(root=str(ROOT), tuned=tuned)],
                         capture_output=True, text=True, timeout=60, check=True)
    return float(out.stdout.strip())


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_shard_sized_buffers_are_given_back_when_freed() -> None:
    plain = _grown_mb(tuned=False)
    if plain < 4.0:
        pytest.skip(f"this C library gave the buffers back by itself (+{plain:.1f} MB)")
    assert _grown_mb(tuned=True) < 1.0
