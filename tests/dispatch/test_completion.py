import json

from supervisor.config import GenerationSection
from supervisor.dispatch.completion import (Completion, Permanent, Retryable,
                                            classify_response, request_body)


def _ok(**over):
    body = {"id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "4",
                                                  "reasoning_content": "2+2"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
                      "reasoning_tokens": 2}}
    body.update(over)
    return json.dumps(body)


def test_request_body_turns_thinking_on_with_live_max_tokens():
    body = request_body("m", [{"role": "user", "content": "hi"}], GenerationSection(), 8192)
    assert body["max_tokens"] == 8192
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert body["separate_reasoning"] is True and body["stream"] is False
    off = request_body("m", [], GenerationSection(enable_thinking=False), 10)
    assert "chat_template_kwargs" not in off


def test_a_good_answer_is_a_completion():
    c = classify_response(200, _ok())
    assert c == Completion("4", "2+2", "stop", 7, 3, 2)


def test_400_is_permanent_with_sglangs_message():
    body = json.dumps({"object": "error", "message": "The input (9000 tokens) is longer than "
                       "the model's context length (8192 tokens).", "type": "BadRequestError",
                       "param": None, "code": 400})
    a = classify_response(400, body)
    assert isinstance(a, Permanent) and "longer than the model's context length" in a.error


def test_5xx_abort_and_nonsense_are_retryable():
    assert isinstance(classify_response(503, "busy"), Retryable)
    aborted = json.loads(_ok())
    aborted["choices"][0]["finish_reason"] = "abort"
    assert "abort" in classify_response(200, json.dumps(aborted)).error
    for junk in ("<html>oops</html>", "{}", json.dumps({"choices": []}),
                 _ok(usage={"completion_tokens": -3}), _ok(usage="lots")):
        a = classify_response(200, junk)
        assert isinstance(a, Retryable) and "nonsense" in a.error, junk
