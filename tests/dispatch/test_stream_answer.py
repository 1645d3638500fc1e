"""Assembling a streamed chat completion (stream_answer.py) from SGLang 0.5.23's chunks, and
judging it as the unstreamed answer would be judged (completion.py)."""

from __future__ import annotations

import json

from supervisor.dispatch.completion import Completion, Permanent, Retryable, classify_response
from supervisor.dispatch.stream_answer import StreamAnswer


def _chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> str:
    # `sglang/srt/entrypoints/openai/sse_utils.py` build_sse_content: one choice, with
    # logprobs, finish_reason and matched_stop null until the end.
    obj = {"id": "r", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                        "matched_stop": None}]}
    if usage is not None:
        obj["usage"] = usage
    return "data: " + json.dumps(obj)


USAGE = {"prompt_tokens": 7, "total_tokens": 12, "completion_tokens": 5,
         "reasoning_tokens": 3, "prompt_tokens_details": None}


def _sglang_stream(finish: str = "stop") -> list[str]:
    """The lines of one streamed answer with a reasoning parser (serving_chat.py
    _generate_chat_stream): role chunk, reasoning deltas, content deltas, finish chunk,
    the include_usage chunk (`"choices": []`), [DONE]; blank lines between events."""
    events = [
        _chunk({"reasoning_content": None, "role": "assistant", "content": ""}),
        _chunk({"reasoning_content": "Let me "}, usage={**USAGE, "completion_tokens": 1}),
        _chunk({"reasoning_content": "think."}, usage={**USAGE, "completion_tokens": 3}),
        _chunk({"reasoning_content": None, "content": "Four"},
               usage={**USAGE, "completion_tokens": 4}),
        _chunk({"reasoning_content": None, "content": "."},
               usage={**USAGE, "completion_tokens": 5}),
        _chunk({"reasoning_content": None}, finish),
        "data: " + json.dumps({"id": "r", "object": "chat.completion.chunk", "created": 1,
                               "model": "m", "choices": [], "usage": USAGE}),
        "data: [DONE]",
    ]
    return [line for e in events for line in (e, "")]


def _unstreamed(finish: str = "stop") -> str:
    return json.dumps({"id": "r", "object": "chat.completion", "choices": [{
        "index": 0, "message": {"role": "assistant", "content": "Four.",
                                "reasoning_content": "Let me think."},
        "finish_reason": finish, "matched_stop": None}], "usage": USAGE})


def _feed(lines: list[str]) -> StreamAnswer:
    sa = StreamAnswer()
    for line in lines:
        sa.feed(line)
    return sa


def test_a_streamed_answer_is_the_unstreamed_one() -> None:
    for finish in ("stop", "length"):
        sa = _feed(_sglang_stream(finish))
        assert sa.ended and sa.tokens == 5
        got = sa.answer()
        assert isinstance(got, Completion)
        assert got == classify_response(200, _unstreamed(finish))


def test_only_chunks_with_text_count_as_tokens_arriving() -> None:
    sa = StreamAnswer()
    got = [sa.feed(line) for line in _sglang_stream()]
    texts = [g for g in got if g is not None]
    assert texts == [("Let me ", None), ("think.", None), (None, "Four"), (None, ".")]
    assert sa.running_tokens == 5


def test_without_usage_the_running_count_or_the_chunks_stand_in() -> None:
    no_usage = [line for line in _sglang_stream() if '"choices": []' not in line]
    sa = _feed(no_usage)
    answer = sa.answer()
    assert isinstance(answer, Completion) and answer.completion_tokens == 5
    bare = [line.replace(', "usage"', ', "x"') for line in no_usage]
    assert _feed(bare).tokens == 4                     # four chunks carried text


def test_an_aborted_stream_is_a_retry_as_unstreamed() -> None:
    # /abort_request ends the stream with finish_reason "abort" (serving_chat.py: a graceful
    # abort without a status code takes the normal finish path).
    got = _feed(_sglang_stream("abort")).answer()
    assert got == classify_response(200, _unstreamed("abort"))
    assert isinstance(got, Retryable) and got.kind == "abort"


def test_a_streamed_error_is_judged_as_the_http_error_of_its_code() -> None:
    # `sglang/srt/entrypoints/openai/serving_base.py` create_streaming_error_response:
    # {"error": {"object": "error", "message", "type", "param", "code"}}, sent when a request
    # is aborted with a status code after the stream began; the usage chunk and [DONE] follow.
    def stream(message: str, code: int) -> list[str]:
        err = {"error": {"object": "error", "message": message, "type": "BadRequest",
                         "param": None, "code": code}}
        return _sglang_stream()[:4] + ["data: " + json.dumps(err), "", "data: [DONE]"]

    refusal = ("The input (300 tokens) is longer than the model's context length "
               "(256 tokens).")
    for message, code in (("Generation aborted: out of memory", 503), (refusal, 400),
                          ("bad sampling setting", 400)):
        got = _feed(stream(message, code)).answer()
        plain = classify_response(code, json.dumps({"object": "error", "message": message,
                                                    "code": code}))
        assert got == plain, (got, plain)
    assert isinstance(_feed(stream(refusal, 400)).answer(), Permanent)


def test_a_stream_without_its_end_or_with_junk_is_a_retry() -> None:
    cut = _feed(_sglang_stream()[:6]).answer()
    assert isinstance(cut, Retryable) and "without a finish_reason" in cut.error
    junk = _feed(_sglang_stream()[:4] + ["data: {not json", ""]).answer()
    assert isinstance(junk, Retryable) and junk.kind == "nonsense answer"
    listed = _feed(["data: [1, 2]", ""]).answer()
    assert isinstance(listed, Retryable) and listed.kind == "nonsense answer"


def test_a_loop_cut_short_is_recorded_as_cut_off() -> None:
    got = _feed(_sglang_stream("abort")).answer(finish_reason="length")
    assert isinstance(got, Completion) and got.finish_reason == "length"
    assert got.content == "Four." and got.completion_tokens == 5


# The whole body of SGLang 0.5.23's answer (HTTP 200) to a streamed request whose prompt is
# longer than its scheduler admits, as the real CPU server sent it (1024-token KV pool,
# 2048-token context): the scheduler's check (sglang/srt/managers/utils.py:283,
# validate_input_length) aborts the request with HTTPStatus.BAD_REQUEST, and the stream
# turns that into an error chunk (sglang/srt/entrypoints/openai/serving_chat.py:2568-2578,
# create_streaming_error_response with code.name / code.value): no role chunk, no usage.
STREAMED_REFUSAL = (
    'data: {"error": {"object": "error", "message": "Input length (1412 tokens) exceeds the '
    'maximum allowed length (1018 tokens). Use a shorter input or enable '
    '--allow-auto-truncate.", "type": "BAD_REQUEST", "param": null, "code": 400}}\n'
    '\n'
    'data: [DONE]\n'
    '\n')


def test_the_schedulers_streamed_length_refusal_fails_the_prompt_for_good() -> None:
    stream = StreamAnswer()
    for line in STREAMED_REFUSAL.splitlines():
        assert stream.feed(line.encode()) is None          # no token arrived
    got = stream.answer()
    assert stream.ended and stream.tokens == 0
    # Permanent, like the unstreamed 400 with the same message, and of its own kind in the
    # breaker's window (not "HTTP 400", the kind of the errors that hit every prompt).
    assert isinstance(got, Permanent) and got.kind == "context-length refusal"
    assert got.error == ("HTTP 400: Input length (1412 tokens) exceeds the maximum allowed "
                         "length (1018 tokens). Use a shorter input or enable "
                         "--allow-auto-truncate.")
    unstreamed = classify_response(400, json.dumps(
        {"object": "error", "message": got.error.removeprefix("HTTP 400: "),
         "type": "BadRequestError", "param": None, "code": 400}))
    assert got == unstreamed
