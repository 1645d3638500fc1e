"""glibc malloc settings that keep a day-long daemon's memory flat.

The daemon's large buffers are transient: a shard's 500 answers read and written (~6 MB at
the seed's 11.5 KB an answer), a shard read back for its upload, a batch of rows. glibc
serves a request of at least M_MMAP_THRESHOLD bytes with a mapping of its own, returned to
the system when freed; but it *raises* that threshold to the size of each such block freed
(up to 32 MB), so after the first shard every later shard-sized buffer comes from the heap,
and what the heap gives back depends on what else sits above it: anonymous RSS swung by
±20 MB around its level over a long run (benchmarks/README.md, "Seed scale"). Setting the
threshold explicitly turns that adjustment off, so big buffers keep their own mappings and
leave with them. Worker threads (the store's, the shard writer's, uploads) would each get
an arena of their own (up to 8 per core), each keeping its freed pages: two arenas bound
that.

Only glibc has these knobs (mallopt elsewhere is absent or a no-op): anything else runs as is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("supervisor")

# <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MMAP_THRESHOLD = 256 * 1024     # a shard, a batch of rows: own mappings, given back on free
TRIM_THRESHOLD = 1024 * 1024    # the heap's free top is given back past this
ARENA_MAX = 2


def tune_malloc() -> bool:
    """Apply the settings; False where the C library is not glibc (nothing changed)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
        _ = libc.gnu_get_libc_version  # glibc only: musl has a mallopt that does nothing
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = all(mallopt(param, value) == 1 for param, value in (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        (M_ARENA_MAX, ARENA_MAX)))
    if not ok:
        log.info("malloc settings not applied (mallopt refused one): memory may swing more")
    return ok
