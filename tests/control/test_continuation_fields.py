"""Continuing truncated answers in the status contract (JSON round trip; an older snapshot
without the fields), `dflash-supervisor status` and `ctl` text, and `/metrics`
(`dflash_continued_tokens_total` and the figures of what a raise would continue)."""

from __future__ import annotations

import json
from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from supervisor.client.text import continuation_line, report, result_text, waste_line
from supervisor.contract.actions import MaxTokensRequest, MaxTokensResult
from supervisor.contract.continuation import Continuation
from supervisor.contract.status import Status, Waste
from supervisor.control.metrics import RestartCauses, render
from tests.fixtures.status_samples import status

SOCK = "/run/dflash-supervisor/control.sock"


def _sample() -> Status:
    s = status(servers=1)
    return replace(s, waste=Waste(kept_tokens=900_000, wasted_tokens=0, goodput=1.0,
                                  continued_answers=312, continued_tokens=1_277_952),
                   continuation=Continuation(continuable=1_733, tokens_kept=7_098_368,
                                             without_ids=214, pending=40))


def test_round_trip_and_an_older_snapshot_without_the_fields() -> None:
    s = _sample()
    assert Status.from_json(s.to_json()) == s
    plain = json.loads(s.to_json())
    del plain["continuation"]
    del plain["waste"]["continued_answers"], plain["waste"]["continued_tokens"]
    old = Status.from_plain(plain)                # as a daemon from before continuing sends it
    assert old.continuation is None and old.waste is not None
    assert (old.waste.continued_answers, old.waste.continued_tokens) == (0, 0)
    # An older client's request without the flag still reads; the newer answer's extra
    # fields have defaults, so an older answer reads too.
    assert MaxTokensRequest.from_json('{"value": 8192}').continue_truncated is False
    assert MaxTokensResult.from_json('{"old": 4096, "new": 8192, "requeued": null}').continued \
        is None


def test_status_text_says_what_a_raise_would_continue_and_what_it_saved() -> None:
    s = _sample()
    lines = [line.strip() for line in report(s, SOCK).splitlines()]
    assert ("waste    goodput 100.0%: 900.0k tokens kept, 0 wasted; 1.3M not decoded again "
            "by continuing 312 truncated answers") in lines
    cont = next(line for line in lines if line.startswith("continue "))
    assert cont == ("continue 40 continuing now (they go out before fresh prompts); 1,733 "
                    "truncated answers can be continued (7.1M tokens kept): ctl max-tokens N "
                    f"--continue-truncated with N above {s.max_tokens:,}; 214 have no stored "
                    "tokens (re-run from the start)")
    assert continuation_line(Continuation(), 4096) is None
    quiet = [line for line in report(replace(s, continuation=Continuation()), SOCK).splitlines()
             if line.startswith("continue ")]
    assert quiet == []
    assert "not decoded again" not in waste_line(Waste())


def test_ctl_says_what_the_raise_continued() -> None:
    answer = MaxTokensResult(old=4096, new=8192, requeued=None, continued=1_733,
                             tokens_kept=7_098_368, from_scratch=214)
    assert result_text(answer) == (
        "max tokens 4096 -> 8192, 1,733 truncated answers to be continued (7,098,368 tokens "
        "kept); 214 answers had no stored tokens: re-run from the start")
    assert result_text(MaxTokensResult(4096, 8192, None)) == "max tokens 4096 -> 8192"


def test_metrics_count_the_tokens_continuing_saved() -> None:
    s = _sample()
    text = render(s, (0, 0), RestartCauses(), {}).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    total = families["dflash_continued_tokens"].samples[0]
    assert (total.name, total.value) == ("dflash_continued_tokens_total", 1_277_952)
    assert families["dflash_continued_answers"].samples[0].value == 312
    figures = {name: families[name].samples[0].value for name in (
        "dflash_continuable_answers", "dflash_continuable_tokens",
        "dflash_truncated_without_ids", "dflash_continuations_pending")}
    assert figures == {"dflash_continuable_answers": 1_733,
                       "dflash_continuable_tokens": 7_098_368,
                       "dflash_truncated_without_ids": 214, "dflash_continuations_pending": 40}
    # A daemon that cannot continue: no figures of what a raise would continue.
    bare = render(replace(s, continuation=None), (0, 0), RestartCauses(), {}).decode()
    assert "dflash_continuable_answers" not in bare
