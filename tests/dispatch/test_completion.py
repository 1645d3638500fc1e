import json

import pytest

from supervisor.dispatch.completion import Completion, Permanent, Retryable, classify_response


def _ok(**over):
    body = {"id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "4",
                                                  "reasoning_content": "2+2"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
                      "reasoning_tokens": 2}}
    body.update(over)
    return json.dumps(body)


def test_a_good_answer_is_a_completion():
    c = classify_response(200, _ok())
    assert c == Completion("4", "2+2", "stop", 7, 3, 2)


def _error(message: str, code: int = 400) -> str:
    # SGLang 0.5.23's error body: sglang/srt/entrypoints/openai/serving_base.py
    # create_error_response.
    return json.dumps({"object": "error", "message": message, "type": "BadRequest",
                       "param": None, "code": code})


# SGLang 0.5.23's refusals of a prompt for its length, word for word.
CONTEXT_REFUSALS = [
    # sglang/srt/managers/tokenizer_manager.py _validate_one_request
    "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
    "Requested token count exceeds the model's maximum context length of 8192 tokens. You "
    "requested a total of 12096 tokens: 8000 tokens from the input messages and 4096 tokens "
    "for the completion. Please reduce the number of tokens in the input messages or the "
    "completion to fit within the limit.",
    # sglang/srt/managers/utils.py validate_input_length (the scheduler's check)
    "Input length (9000 tokens) exceeds the maximum allowed length (8186 tokens). Use a "
    "shorter input or enable --allow-auto-truncate.",
]


@pytest.mark.parametrize("message", CONTEXT_REFUSALS)
def test_a_context_length_refusal_is_permanent_with_sglangs_message(message):
    a = classify_response(400, _error(message))
    assert isinstance(a, Permanent) and a.error == f"HTTP 400: {message}"
    # Its own kind in the breaker's window, apart from the 400s that hit every prompt.
    assert a.kind == "context-length refusal"


@pytest.mark.parametrize("message", [
    # `job.model` with a ":" (sglang/srt/entrypoints/openai/serving_base.py
    # _parse_model_parameter) and LoRA off: tokenizer_manager.py
    "LoRA adapter 'v2' was requested, but LoRA is not enabled. Please launch the server with "
    "--enable-lora flag and preload adapters using --lora-paths or /load_lora_adapter endpoint.",
    # serving_chat.py _validate_request
    "Messages cannot be empty.",
    "jinja2.exceptions.TemplateError: Conversation roles must alternate user/assistant",
])
def test_any_other_400_is_retried_with_an_attempt_counted(message):
    a = classify_response(400, _error(message))
    assert isinstance(a, Retryable) and a.error == f"HTTP 400: {message}"
    assert a.kind == "HTTP 400"


def test_a_400_without_sglangs_body_is_retried():
    # FastAPI's own validation error, or a proxy's page: not SGLang refusing the prompt.
    a = classify_response(400, '{"detail": [{"msg": "field required"}]}')
    assert isinstance(a, Retryable) and "field required" in a.error


def test_5xx_abort_and_nonsense_are_retryable():
    busy = classify_response(503, "busy")
    assert isinstance(busy, Retryable) and busy.kind == "HTTP 503"
    aborted = json.loads(_ok())
    aborted["choices"][0]["finish_reason"] = "abort"
    assert "abort" in classify_response(200, json.dumps(aborted)).error
    for junk in ("<html>oops</html>", "{}", json.dumps({"choices": []}),
                 _ok(usage={"completion_tokens": -3}), _ok(usage="lots")):
        a = classify_response(200, junk)
        assert isinstance(a, Retryable) and "nonsense" in a.error, junk
        assert a.kind == "nonsense answer"
