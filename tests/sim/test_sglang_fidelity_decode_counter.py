"""The simulator's per-decode-step token counter, as SGLang 0.5.23 keeps it: the hang
watchdog reads it where requests are not streamed (servers/hang_rule.py).

- `sglang:realtime_tokens_total{mode="decode"}` is bumped by every decode step
  (`srt/managers/scheduler_components/metrics_reporter.py` report_decode_stats ->
  `srt/observability/metrics_collector.py` increment_realtime_tokens), so it moves while an
  answer is still being written;
- `sglang:generation_tokens_total` is bumped only when a request finishes
  (`srt/managers/tokenizer_manager.py` collect_metrics: `if state.finished:` ->
  observe_one_finished_request).
"""

from __future__ import annotations

import threading

from tests.sim.sglang_calls import chat, families, get


def _counters(base_url: str) -> tuple[float, float]:
    fams = families(get(base_url, "/metrics").text)
    decode = sum(s.value for s in fams["sglang:realtime_tokens"].samples
                 if s.labels.get("mode") == "decode") if "sglang:realtime_tokens" in fams else 0.0
    finished = sum(s.value for s in fams["sglang:generation_tokens"].samples
                   if s.name.endswith("_total"))
    return decode, finished


def test_the_decode_counter_moves_while_an_answer_is_written(sim_server):
    # 300 tokens at 100 tok/s: three seconds of decoding, read twice in the middle.
    sim = sim_server("--sim-tokens-per-s", "100", "--sim-time-scale", "1",
                     "--sim-startup-s", "0", "--enable-metrics")
    decode0, finished0 = _counters(sim.base_url)
    done = threading.Event()

    def ask() -> None:
        chat(sim.base_url, max_tokens=300, ignore_eos=True)
        done.set()
    t = threading.Thread(target=ask)
    t.start()
    try:
        done.wait(1.0)
        decode1, finished1 = _counters(sim.base_url)
        done.wait(0.7)
        decode2, finished2 = _counters(sim.base_url)
        assert not done.is_set(), "the answer finished before the reads"
        assert decode0 < decode1 < decode2
        assert finished0 == finished1 == finished2
    finally:
        t.join(10)
    decode3, finished3 = _counters(sim.base_url)
    assert finished3 > finished0 and decode3 >= decode2
