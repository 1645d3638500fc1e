"""A node without a driver (the demo on a laptop) is told once, in one short line, that GPU
figures are n/a: not on every retry, and not in a sentence that wraps an 80-column terminal."""

from __future__ import annotations

import logging

import pynvml
import pytest

from supervisor.gpu import NvmlSource

from .fake_nvml import FakeNvml


def test_no_driver_is_one_short_line_once(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    nvml = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    source = NvmlSource(nvml=nvml, retry_init_s=30.0, clock=lambda: now[0])  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="supervisor.gpu"):
        for _ in range(5):
            assert not source.sample().available
            now[0] += 31          # past the retry: the driver is asked again each time
    assert nvml.init_calls == 5
    notices = [r for r in caplog.records if "NVML" in r.getMessage()]
    assert len(notices) == 1
    line = notices[0].getMessage()
    # The demo prints it as "WARNING: <message>": that line fits 80 columns.
    assert "\n" not in line and len("WARNING: " + line) <= 79, line
    assert "NVML Shared Library Not Found" in line
