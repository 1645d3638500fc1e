"""The labels every metric series carries: the job and this node's partition.

A cluster's Prometheus scrapes each node of a many-node job; with `job` and `partition`
("3/20") on every series, `sum by (job)` is the fleet and `by (partition)` one node, with no
relabelling in the scrape config. The exposed `job` label collides with the one Prometheus
sets from its scrape job: the scrape config says `honor_labels: true` so the daemon's wins
(without it Prometheus keeps it as `exported_job`; docs/monitoring.md).

The labels are added to whatever the status collector yields, so a metric added later carries
them without a line of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from supervisor.config import JobConfig

# A one-node job still says which part it is: "0/1" sums like any other node.
WHOLE = "0/1"


def job_name(cfg: JobConfig) -> str:
    """`control.metrics_job`, else the output's last path part: every node of a job shares
    its output prefix, and two jobs never do."""
    if cfg.control.metrics_job:
        return cfg.control.metrics_job
    parts = [p for p in cfg.job.output.rstrip("/").split("/") if p and p != "s3:"]
    return parts[-1] if parts else "dflash"


def series_labels(job: str | None, partition: str | None) -> dict[str, str]:
    return {"job": job or "dflash", "partition": partition or WHOLE}


class Labelled(Collector):
    """`inner`'s metrics with `labels` added to every sample."""

    def __init__(self, inner: Collector, labels: dict[str, str]) -> None:
        self.inner, self.labels = inner, labels

    def collect(self) -> Iterator[Metric]:
        for family in self.inner.collect():
            family.samples = [s._replace(labels={**s.labels, **self.labels})
                              for s in family.samples]
            yield family
