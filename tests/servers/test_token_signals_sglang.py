"""The token signals the hang watchdog reads, held to the real SGLang 0.5.23 (the CPU build
set up by ../shared/tools/sglang-cpu; skipped where it is not installed):

- `sglang:realtime_tokens_total{mode="decode"}` moves while an answer is being written, and
  `sglang:generation_tokens_total` only when it has finished (so only the first is a token
  signal: servers/hang_rule.py);
- a streamed request waiting in SGLang's queue gets no header before its first chunk
  (serving_chat.py _handle_streaming_request), so the stream watch starts at the send
  (dispatch/stream_request.py).

One server, a few requests: the CPU build decodes a tiny random model slowly."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import anyio
import httpx
import pytest

from supervisor.sglang.metrics import parse_sglang_metrics
from tests.fixtures.ports import free_port

# Loading SGLang takes ~20 s on an idle machine, minutes on a busy one.
pytestmark = [pytest.mark.slow, pytest.mark.real_sglang, pytest.mark.timeout(900)]

BASE = Path(os.environ.get("SGLCPU_DIR", "/var/tmp/sglang-cpu"))
PYTHON = BASE / "venv" / "bin" / "python"
MODEL = BASE / "tiny"


@pytest.fixture
def sglang_cpu(tmp_path: Path):
    if not (PYTHON.exists() and MODEL.exists()):
        pytest.skip("the CPU SGLang is not set up here (../shared/tools/sglang-cpu)")
    port = free_port()
    log = open(tmp_path / "sglang.log", "wb")
    proc = subprocess.Popen(
        [str(PYTHON), "-m", "sglang.launch_server", "--model-path", str(MODEL),
         "--device", "cpu", "--attention-backend", "torch_native",
         "--sampling-backend", "pytorch", "--mem-fraction-static", "0.1", "--sleep-on-idle",
         "--max-total-tokens", "4096", "--max-running-requests", "1", "--enable-metrics",
         "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        with httpx.Client(trust_env=False, timeout=30) as client:
            while True:
                assert proc.poll() is None, (tmp_path / "sglang.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "SGLang not healthy within 180 s"
                try:
                    if client.get(base + "/health_generate").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(1)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _body(tokens: int, stream: bool) -> dict:
    return {"model": "default", "messages": [{"role": "user", "content": "count"}],
            "max_tokens": tokens, "ignore_eos": True, "stream": stream}


async def test_real_sglang_token_counter_and_queued_stream_headers(sglang_cpu: str) -> None:
    base = sglang_cpu
    # "b" gets nothing until "a" has finished: a read timeout above a loaded machine's
    # decode of "a" (the CPU server writes ~150 tok/s alone, a tenth of that when starved).
    async with httpx.AsyncClient(trust_env=False, timeout=300) as client:
        async def scrape():
            return parse_sglang_metrics((await client.get(base + "/metrics")).text)

        before = await scrape()
        headers_at: dict[str, float] = {}
        first_chunk_at: dict[str, float] = {}

        done: set[str] = set()

        async def stream(tag: str, tokens: int) -> None:
            t0 = time.monotonic()
            async with client.stream("POST", base + "/v1/chat/completions",
                                     json=_body(tokens, True)) as resp:
                headers_at[tag] = time.monotonic() - t0
                async for line in resp.aiter_lines():
                    if line.startswith("data: {") and tag not in first_chunk_at:
                        first_chunk_at[tag] = time.monotonic() - t0
            done.add(tag)

        during: list = []
        async with anyio.create_task_group() as tg:
            # One running at a time (--max-running-requests 1): "b" waits in the queue
            # while "a" decodes.
            tg.start_soon(stream, "a", 800)   # ~5 s alone: outlasts the first scrapes
            await anyio.sleep(0.5)
            tg.start_soon(stream, "b", 8)
            for _ in range(6):
                await anyio.sleep(0.5)
                m = await scrape()
                if "a" in done:
                    break
                during.append(m)
        after = await scrape()

    assert during, "the first answer finished before it could be read mid-decode"
    mid = during[-1]
    # Decode steps are counted while "a" is written; nothing has finished yet.
    assert mid.decode_tokens_total is not None and before.decode_tokens_total is not None
    assert mid.decode_tokens_total > before.decode_tokens_total
    assert (mid.generation_tokens_total or 0) == (before.generation_tokens_total or 0)
    assert (after.generation_tokens_total or 0) > (before.generation_tokens_total or 0)
    # The queued request's headers came with its first chunk, once "a" had finished.
    assert headers_at["b"] >= 1.0, headers_at
    assert abs(first_chunk_at["b"] - headers_at["b"]) < 0.5
