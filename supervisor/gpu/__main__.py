"""`python -m supervisor.gpu [-n N] [--interval S] [--fake]`: sample N times, print JSON lines.

The device check for a GPU machine: every line is one GpuTelemetry as JSON, so the units
(W, bytes, °C, MHz) can be compared with `nvidia-smi` by eye.
"""

from __future__ import annotations

import argparse
import json
import sys

import anyio

from supervisor.gpu.fake_source import FakeGpuSource
from supervisor.gpu.nvml_source import NvmlSource
from supervisor.gpu.sampler import GpuSampler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m supervisor.gpu", description=__doc__)
    parser.add_argument("-n", "--samples", type=int, default=3)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--fake", action="store_true", help="use the fake source (no driver)")
    args = parser.parse_args(argv)
    source = FakeGpuSource() if args.fake else NvmlSource()
    sampler = GpuSampler(source, interval_s=args.interval)
    available = True

    async def go() -> None:
        nonlocal available
        try:
            for i in range(args.samples):
                snap = await sampler.sample_once()
                available = available and snap.available
                print(json.dumps(snap.as_dict(), sort_keys=True), flush=True)
                if i + 1 < args.samples:
                    await anyio.sleep(args.interval)
        finally:
            source.close()

    anyio.run(go)
    # 0 with data, 1 when the driver was unavailable (the JSON says why).
    return 0 if available else 1


if __name__ == "__main__":
    sys.exit(main())
