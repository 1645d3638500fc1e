"""Watching a server's SGLang metrics: the view the status shows, the retraction rate per poll
interval, the over-commit flag said once on and once off, the polling rule (only with
--enable-metrics, or when a first scrape finds metrics) and each sample's time on a real
simulated server."""

from __future__ import annotations

import http.server
import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from supervisor.job.contract_status import _sglang
from supervisor.servers.overcommit import OvercommitPolicy
from supervisor.servers.sglang_monitor import BLIND, EVENT_KIND, SglangMonitor
from supervisor.servers.sglang_view import SglangView
from supervisor.sglang.metrics import Scrape, SglangMetrics

POLICY = OvercommitPolicy(queue_polls=2, retraction_polls=2, retractions_per_min=10.0,
                          clear_polls=2)


def figures(running: int = 60, queued: int = 0, retracted: float | None = 0.0,
            usage: float = 0.9, thr: float = 1500.0) -> Scrape:
    return Scrape(SglangMetrics(running=running, queued=queued, token_usage=usage,
                                retractions_total=retracted, gen_throughput=thr, found=True))


class Events:
    def __init__(self) -> None:
        self.rows: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, kind: str, detail: dict[str, Any]) -> None:
        self.rows.append((kind, detail))


async def test_view_carries_the_figures_and_the_retraction_rate_per_interval() -> None:
    mon = SglangMonitor("gpu0", POLICY, clock=lambda: 1000.0)
    await mon.take(figures(retracted=10.0), 0.0, 64)
    assert mon.view == SglangView(polled=True, running=60, queued=0, token_usage=0.9,
                                  retractions_total=10.0, retractions_per_min=None,
                                  gen_throughput=1500.0, scraped_at=1000.0)
    await mon.take(figures(retracted=12.0), 30.0, 64)
    assert mon.view.retractions_per_min == pytest.approx(4.0)     # 2 in 30 s
    await mon.take(Scrape(None, "/metrics: HTTP 503"), 35.0, 64)
    assert (mon.view.running, mon.view.retractions_per_min, mon.view.error) == \
        (None, None, "/metrics: HTTP 503")
    # The rate after a gap is over the time since the last good scrape.
    await mon.take(figures(retracted=13.0), 60.0, 64)
    assert mon.view.retractions_per_min == pytest.approx(2.0)     # 1 in 30 s


async def test_overcommit_is_said_once_on_and_once_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="supervisor.servers")
    events = Events()
    mon = SglangMonitor("gpu3", POLICY, emit=events)
    for t in range(4):                                  # a held queue: on at the 2nd poll
        await mon.take(figures(running=52, queued=12), 5.0 * t, 64)
    assert mon.view.overcommitted and "queue held" in (mon.view.overcommit_reason or "")
    await mon.take(Scrape(None, "/metrics: no answer within 5 s"), 20.0, 64)
    assert mon.view.overcommitted, "a failed scrape is no evidence either way"
    for t in range(5, 9):                               # clean: off after 2
        await mon.take(figures(running=64, queued=0), 5.0 * t, 64)
    assert not mon.view.overcommitted and mon.view.overcommit_reason is None

    assert [(k, d["overcommitted"]) for k, d in events.rows] == [(EVENT_KIND, True),
                                                                 (EVENT_KIND, False)]
    on = events.rows[0][1]
    assert (on["running"], on["queued"], on["in_flight"], on["token_usage"]) == (52, 12, 64, 0.9)
    lines = [r.getMessage() for r in caplog.records if r.name == "supervisor.servers"]
    assert [line.split(":")[1].strip() for line in lines] == ["over-committed",
                                                              "no longer over-committed"]
    assert lines[0].startswith("gpu3: over-committed: queue held over 2 polls (12 -> 12")
    assert caplog.records[0].levelno == logging.WARNING


async def test_leaving_ready_ends_the_flag_and_the_figures() -> None:
    events = Events()
    mon = SglangMonitor("gpu1", POLICY, emit=events)
    for t, n in enumerate((0.0, 20.0, 40.0)):          # 20 retracted every 5 s: 240/min
        await mon.take(figures(retracted=n), 5.0 * t, 64)
    assert mon.view.overcommitted and "retracting 240.0 requests/min" in \
        (mon.view.overcommit_reason or "")
    await mon.end_life()
    assert mon.view == SglangView()
    assert [d for _, d in events.rows][-1] == {"overcommitted": False,
                                               "reason": "the server left READY"}
    # The next life's counter starts from zero: no rate across the two lives.
    await mon.take(figures(retracted=0.0), 100.0, 64)
    await mon.take(figures(retracted=0.0), 105.0, 64)
    assert mon.view.retractions_per_min == 0.0 and not mon.view.overcommitted
    await mon.end_life()
    assert len(events.rows) == 2, "a server that was never flagged says nothing at its end"


async def _watch_until(mon: SglangMonitor, base_url: str, argv: list[str],
                       in_flight: Callable[[], int], done: Callable[[], bool],
                       what: str) -> bool:
    """Run the watcher until `done()`; True if the watcher returned by itself first."""
    returned = False
    async with httpx.AsyncClient(trust_env=False) as client:
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                nonlocal returned
                await mon.watch(client, base_url, argv, 0.05, in_flight)
                returned = True
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            with anyio.move_on_after(30.0) as scope:
                while not done():
                    await anyio.sleep(0.02)
            assert not scope.cancelled_caught, f"timed out waiting for {what}"
            tg.cancel_scope.cancel()
    return returned


async def test_real_server_with_metrics_queueing_past_its_slots_is_flagged(
        sim_server: Callable[..., Any]) -> None:
    """A simulated server with 2 slots and 6 requests sent: SGLang's gauges over real HTTP
    say 2 running and 4 queued while we have 6 in flight, so it is over-committed."""
    sim = sim_server("--enable-metrics", "--max-running-requests", "2",
                     "--sim-tokens-per-s", "20")
    argv = ["python", "-m", "sglang.launch_server", "--enable-metrics"]
    events = Events()
    mon = SglangMonitor("gpu0", POLICY, clock=lambda: 1.0, emit=events)

    async def ask(client: httpx.AsyncClient) -> None:
        with anyio.move_on_after(20.0):
            await client.post(sim.base_url + "/v1/chat/completions", timeout=30.0, json={
                "model": "sim", "max_tokens": 4000,
                "messages": [{"role": "user", "content": "write a long story"}]})

    async with httpx.AsyncClient(trust_env=False) as client:
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(ask, client)
            returned = await _watch_until(mon, sim.base_url, argv, lambda: 6,
                                          lambda: mon.view.overcommitted, "the flag")
            tg.cancel_scope.cancel()
    assert not returned
    v = mon.view
    assert v.polled and v.error is None and v.scraped_at == 1.0
    assert (v.running, v.queued) == (2, 4)
    assert "running 2 of our 6 in flight" in (v.overcommit_reason or "")
    assert [d["overcommitted"] for _, d in events.rows] == [True]


async def test_real_server_without_metrics_is_asked_once(
        sim_server: Callable[..., Any]) -> None:
    """No --enable-metrics: /metrics is 404 and the watcher stops after one try; nothing
    is shown as polled, and the view says what is blind without them."""
    sim = sim_server()
    mon = SglangMonitor("gpu0", POLICY)
    # The watcher returns by itself (bounded here in case it would not).
    async with httpx.AsyncClient(trust_env=False) as client:
        with anyio.fail_after(10.0):
            await mon.watch(client, sim.base_url, ["python", "-m", "sglang.launch_server"],
                            0.05, lambda: 0)
    assert mon.view == SglangView(error=BLIND)
    assert "over-commit, saturation and waiting detection are blind" in BLIND


async def test_metrics_found_without_the_flag_are_polled(
        sim_server: Callable[..., Any]) -> None:
    """A launch wrapper that enables metrics itself: the first scrape finds them, so the
    server is polled although its argv lacks --enable-metrics."""
    sim = sim_server("--enable-metrics")
    mon = SglangMonitor("gpu0", POLICY)
    polls = 0
    real_take = mon.take

    async def counting_take(result: Scrape, now: float, in_flight: int) -> None:
        nonlocal polls
        polls += 1
        await real_take(result, now, in_flight)

    mon.take = counting_take  # type: ignore[method-assign]
    returned = await _watch_until(mon, sim.base_url, ["python", "-m", "sglang.launch_server"],
                                  lambda: 0, lambda: polls >= 3, "three polls")
    assert not returned
    assert mon.view.polled and mon.view.running == 0 and mon.view.error is None


async def test_real_server_retracting_is_flagged(sim_server: Callable[..., Any]) -> None:
    """A simulated server under KV pressure (`--sim-fault retract`: SGLang's retraction line
    and `sglang:num_retracted_requests_total` every 2 simulated seconds) with room for all
    we send: the retraction rate, not a queue, flags it."""
    sim = sim_server("--enable-metrics", "--sim-fault", "retract", "--sim-time-scale", "10",
                     "--max-running-requests", "8")
    policy = OvercommitPolicy(queue_polls=3, retraction_polls=10, retractions_per_min=10.0,
                              clear_polls=3)
    mon = SglangMonitor("gpu0", policy)

    async def ask(client: httpx.AsyncClient) -> None:
        with anyio.move_on_after(20.0):
            await client.post(sim.base_url + "/v1/chat/completions", timeout=30.0, json={
                "model": "sim", "max_tokens": 30000,
                "messages": [{"role": "user", "content": "write a long story"}]})

    async with httpx.AsyncClient(trust_env=False) as client:
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(ask, client)
            await _watch_until(mon, sim.base_url, ["--enable-metrics"], lambda: 8,
                               lambda: mon.view.overcommitted, "the flag")
            tg.cancel_scope.cancel()
    v = mon.view
    assert v.retractions_total is not None and v.retractions_total >= 1
    assert (v.overcommit_reason or "").startswith("retracting "), v.overcommit_reason
    assert "queue" not in (v.overcommit_reason or "")
    assert "KV cache pool is full. Retract requests." in sim.log_text()


class _FlakyMetrics(http.server.BaseHTTPRequestHandler):
    """Answers /metrics 503 the first 3 times (a busy server, or gauges not yet logged),
    then SGLang's text: 3 running, 1 queued."""
    calls = 0
    BODY = ('# TYPE sglang:num_running_reqs gauge\n'
            'sglang:num_running_reqs{engine_type="unified",model_name="m",tp_rank="0"} 3.0\n'
            'sglang:num_queue_reqs{engine_type="unified",model_name="m",tp_rank="0"} 1.0\n')

    def do_GET(self) -> None:          # noqa: N802 (the http.server name)
        type(self).calls += 1
        ok = type(self).calls > 3
        body = (self.BODY if ok else "busy").encode()
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


async def test_with_the_flag_a_failed_scrape_is_retried_not_given_up() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FlakyMetrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    mon = SglangMonitor("gpu0", POLICY)
    errors: list[str | None] = []
    real_take = mon.take

    async def recording_take(result: Scrape, now: float, in_flight: int) -> None:
        errors.append(result.error)
        await real_take(result, now, in_flight)

    mon.take = recording_take  # type: ignore[method-assign]
    try:
        returned = await _watch_until(
            mon, url, ["python", "-m", "sglang.launch_server", "--enable-metrics"],
            lambda: 0, lambda: mon.view.running == 3, "figures after three failed scrapes")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert not returned
    assert errors[:3] == ["/metrics: HTTP 503"] * 3 and errors[3] is None
    assert mon.view.polled and (mon.view.running, mon.view.queued) == (3, 1)


def tokens(decode: float | None, finished: float | None = None, queued: int = 0) -> Scrape:
    return Scrape(SglangMetrics(running=4, queued=queued, token_usage=0.5, retractions_total=0.0,
                                gen_throughput=10.0, decode_tokens_total=decode,
                                generation_tokens_total=finished, found=True))


async def test_the_token_clock_moves_with_the_decode_counter_only() -> None:
    mon = SglangMonitor("gpu0", POLICY)
    await mon.take(tokens(100.0, 10.0), 1.0, 4)
    assert (mon.token_counter, mon.tokens_moved_at) == ("decode", 1.0)
    await mon.take(tokens(100.0, 50.0), 2.0, 4)       # a request finished, no decode step
    assert mon.tokens_moved_at == 1.0
    await mon.take(tokens(180.0, 50.0), 3.0, 4)
    assert mon.tokens_moved_at == 3.0
    await mon.end_life()
    assert (mon.token_counter, mon.tokens_moved_at) == (None, None)


async def test_only_the_finished_counter_is_not_a_token_signal() -> None:
    mon = SglangMonitor("gpu0", POLICY)
    await mon.take(tokens(None, 10.0), 1.0, 4)
    assert mon.token_counter == "finished"


async def test_queueing_is_a_queue_a_retraction_or_the_flag() -> None:
    mon = SglangMonitor("gpu0", POLICY)
    await mon.take(tokens(1.0), 1.0, 4)
    assert not mon.queueing
    await mon.take(tokens(2.0, queued=3), 2.0, 4)
    assert mon.queueing


async def test_each_good_scrape_stamps_the_sample_and_the_status_says_its_age(
        sim_server: Callable[..., Any]) -> None:
    """A simulated server with metrics: each good scrape stamps the view with the daemon's
    clock and the poll interval; the status contract's age is the snapshot's time less that
    stamp, so a sample left in place by a late scrape shows its age."""
    sim = sim_server("--enable-metrics")
    clock = [1000.0]
    mon = SglangMonitor("gpu0", POLICY, clock=lambda: clock[0])
    argv = ["python", "-m", "sglang.launch_server", "--enable-metrics"]
    returned = await _watch_until(mon, sim.base_url, argv, lambda: 0,
                                  lambda: mon.view.scraped_at is not None, "a scrape")
    assert not returned
    v = mon.view
    assert (v.scraped_at, v.interval_s, v.error) == (1000.0, 0.05, None)
    fields = _sglang(v, 1000.5)
    assert (fields["sglang_age_s"], fields["sglang_interval_s"]) == (0.5, 0.05)
    # No scrape since (the watcher has stopped, as a stuck one would): the sample ages.
    assert _sglang(mon.view, 1012.0)["sglang_age_s"] == 12.0
    # A failed scrape clears the figures and keeps the last good sample's time.
    await mon.take(Scrape(None, error="/metrics: no answer within 5 s"), 2.0, 0)
    assert mon.view.running is None and mon.view.scraped_at == 1000.0
    await mon.end_life()
    assert _sglang(mon.view, 1012.0)["sglang_age_s"] is None
