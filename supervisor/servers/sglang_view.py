"""What the daemon shows of one server's SGLang metrics (filled by sglang_monitor.py): a plain
record, so the server's snapshot carries it without importing the scraper."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SglangView:
    """What the status shows of one server's SGLang metrics. `polled` False: not read
    (no --enable-metrics, or not READY); a figure None: n/a."""

    polled: bool = False
    running: int | None = None
    queued: int | None = None
    token_usage: float | None = None
    retractions_total: float | None = None
    retractions_per_min: float | None = None   # over the last poll interval
    gen_throughput: float | None = None
    error: str | None = None                   # why the last scrape gave nothing
    scraped_at: float | None = None            # unix seconds of the last good scrape
    interval_s: float | None = None            # how often it is scraped (None: not polled)
    overcommitted: bool = False
    overcommit_reason: str | None = None
    retracting: bool = False                   # the over-commit sign at the last poll was
                                               # retractions (a full KV pool), not a queue
