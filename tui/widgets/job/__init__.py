"""The job region: progress and rates, the throughput sparkline, the output-length histogram."""
