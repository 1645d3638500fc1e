"""SGLang's figures net of our own queue ahead, for the over-commit flag and the saturation
guard.

The dispatcher keeps `dispatch.queue_ahead` requests beyond what a server runs
(inflight_limit.py), so SGLang's `num_queue_reqs` holds about that many of ours at every
poll, and we have that many more in flight than it runs. Both signs of over-commitment read
exactly those two figures (a queue of ours held over polls, SGLang running fewer than we
sent: overcommit.py, saturation_guard.py), so read raw they would take the queue we asked
for as SGLang refusing to run what we send, and cut the limit to below what it runs.

Net of the queue ahead the figures are what they were without it: a server running all L
of its slots shows queue 0 of L in flight; one whose KV pool admits only R of them shows
queue L - R of L, as before. Between a completion and its replacement's arrival the queue
is one short, which only reads as calmer. What the operator sees (the status's queue) stays
SGLang's own figure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NetFigures:
    in_flight: int          # ours, less the queue ahead: what we ask SGLang to run
    queued: int | None      # SGLang's queue less the queue ahead (None: not read)


def net_of_queue_ahead(in_flight: int, queued: int | None, ahead: int) -> NetFigures:
    return NetFigures(max(0, in_flight - ahead),
                      None if queued is None else max(0, queued - ahead))
