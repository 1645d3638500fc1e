"""A continuation on SGLang 0.5.23's chat route (supervisor/sglang/continuation.py): the body
it goes out with, how the whole answer is stitched and split, which sampling settings make it
inexact; and the ids chunk read off a real stream line (stream_answer.py)."""

from __future__ import annotations

import json

import pytest

from state.records import Completion, StoredAnswer, TokenIds
from supervisor.config import GenerationSection
from supervisor.dispatch.stream_answer import StreamAnswer
from supervisor.sglang.chat_request import request_body
from supervisor.sglang.continuation import continuation_body, inexact_sampling, split_answer, stitch

MESSAGES = [{"role": "user", "content": "why is the sky blue?"}]


def _stored(in_reasoning: bool, n: int = 4) -> StoredAnswer:
    return StoredAnswer(TokenIds((7, 8, 9), tuple(range(100, 100 + n)), in_reasoning),
                        prompt_tokens=3, completion_tokens=n, reasoning_tokens=n, max_tokens=n)


@pytest.mark.parametrize("in_reasoning, prefix", [(True, "<think>"),
                                                  (False, "<think></think>")])
def test_the_body_runs_on_the_exact_ids_with_the_parsers_state_and_the_rest_of_the_limit(
        in_reasoning, prefix):
    plain = request_body("m", MESSAGES, GenerationSection(), 10, rid="p#1#0")
    body = continuation_body(plain, _stored(in_reasoning), 10, thinking=True)
    assert body["input_ids"] == [7, 8, 9, 100, 101, 102, 103]
    assert body["continue_final_message"] is True
    assert body["messages"] == [*MESSAGES, {"role": "assistant", "content": prefix}]
    assert body["max_completion_tokens"] == 6
    # Same sampling, streaming and request id as the prompt's own request; that one is
    # left as it was.
    for key in ("temperature", "top_p", "stream", "rid", "stream_options",
                "chat_template_kwargs", "separate_reasoning"):
        assert body[key] == plain[key]
    assert "input_ids" not in plain and plain["messages"] == MESSAGES
    json.dumps(body)


@pytest.mark.parametrize("text, thinking, split", [
    ("<think>\nhmm, light scatters", True, ("", "\nhmm, light scatters")),
    ("<think>\nhmm\n</think>\n\nRayleigh.", True, ("\n\nRayleigh.", "\nhmm\n")),
    ("<think><think>a</think>b</think>c", True, ("b</think>c", "a")),
    ("</think>answer", True, ("answer", None)),
    ("plain answer", False, ("plain answer", None)),
])
def test_the_whole_text_splits_as_sglangs_reasoning_parser_splits_it_in_one_go(
        text, thinking, split):
    assert split_answer(text, thinking) == split


def test_the_stitched_answer_adds_the_parts_and_reads_the_parsers_state_off_the_text():
    part = Completion(content="x", reasoning_content="y", finish_reason="stop",
                      prompt_tokens=7, completion_tokens=3, reasoning_tokens=1)
    whole, ids = stitch(_stored(True), part, [200, 201, 202],
                        "<think>\nlong thought\n</think>\n\nThe answer.", thinking=True)
    assert (whole.content, whole.reasoning_content) == ("\n\nThe answer.", "\nlong thought\n")
    assert (whole.finish_reason, whole.prompt_tokens, whole.completion_tokens,
            whole.reasoning_tokens) == ("stop", 3, 7, 5)
    assert ids.output_ids == (100, 101, 102, 103, 200, 201, 202)
    assert ids.prompt_ids == (7, 8, 9) and ids.parts == 2 and not ids.in_reasoning
    _, again = stitch(_stored(True), part, [5], "<think>still going", thinking=True)
    assert again.in_reasoning


def test_sampling_that_restarts_with_a_continuation_is_named(tmp_path):
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"temperature": 0.6, "repetition_penalty": 1.05}))
    flags = {"preferred-sampling-params": json.dumps(
        {"frequency_penalty": 0.5, "presence_penalty": 0.0, "stop": ["\n\n"], "top_k": 20})}
    found = inexact_sampling(flags, str(tmp_path))
    assert found == ["frequency_penalty 0.5 (--preferred-sampling-params)",
                     "stop ['\\n\\n'] (--preferred-sampling-params)",
                     "repetition_penalty 1.05 (the model's generation_config.json)"]
    # The model's defaults are not read under --sampling-defaults openai.
    assert inexact_sampling({"sampling-defaults": "openai"}, str(tmp_path)) == []
    assert inexact_sampling({}, str(tmp_path / "no-such-model")) == []


def test_the_ids_chunk_is_read_and_nothing_else_changes():
    sa = StreamAnswer()
    sa.feed(b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"a"},'
            b'"finish_reason":null}]}')
    sa.feed(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}')
    sa.feed(b'data: {"id":"x","choices":[],"sglext":{"input_ids":[1,2],'
            b'"output_ids":[[5,6]]}}')
    sa.feed(b'data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":2}}')
    sa.feed(b"data: [DONE]")
    assert (sa.input_ids, sa.output_ids) == ([1, 2], [5, 6])
    answer = sa.answer()
    assert isinstance(answer, Completion) and answer.completion_tokens == 2
    odd = StreamAnswer()
    odd.feed(b'data: {"choices":[],"sglext":{"input_ids":[1,-2],"output_ids":"no"}}')
    assert (odd.input_ids, odd.output_ids) == (None, None)
