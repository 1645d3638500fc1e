"""Which HTTP 400 answers are SGLang refusing one prompt for its length.

Those are the only errors that are the prompt's own fault for good: the same prompt is
refused the same way at every attempt, while the rest of the job runs. Every other 400
(a chat-template error, `job.model` with a `:` read as a LoRA adapter, a sampling setting
the server rejects) says nothing about the prompt and is as likely to hit every prompt.

SGLang 0.5.23 answers a chat completion with HTTP 400 and {"object":"error","message":...}
for any ValueError (sglang/srt/entrypoints/openai/serving_base.py `handle_request`, and
serving_chat.py `_handle_non_streaming_request`). The length refusals among them:
- sglang/srt/managers/tokenizer_manager.py `_validate_one_request` (:1349, :1372):
  "The input (N tokens) is longer than the model's context length (C tokens)."
  "Requested token count exceeds the model's maximum context length of C tokens. You
  requested a total of T tokens: ..." (input plus max tokens past the context)
- sglang/srt/managers/utils.py:284 `validate_input_length`, raised in the scheduler and turned
  into a 400 by tokenizer_manager.py `_handle_abort_finish_reason`:
  "Input length (N tokens) exceeds the maximum allowed length (M tokens). Use a shorter
  input or enable --allow-auto-truncate."
- sglang/srt/managers/scheduler.py:3234 (multimodal inputs, the same path):
  "Multimodal prompt is too long after expanding multimodal tokens. ..."

Streamed, the scheduler's refusal is no 400 at all: the answer is HTTP 200 and its only
chunk is `data: {"error": {"object": "error", "message": "Input length (1412 tokens)
exceeds the maximum allowed length (1018 tokens). ...", "type": "BAD_REQUEST", "param":
null, "code": 400}}`, then `data: [DONE]` (serving_chat.py:2568-2578, an abort with a
status code; seen on the real 0.5.23 CPU server with a prompt over its 1024-token KV pool).
supervisor/dispatch/stream_answer.py judges that chunk as the 400 of its code, so both forms
end here alike.

Its kind is its own (`KIND`), not "HTTP 400": the circuit breaker's window and the status
show a prompt refused for its length apart from the 400s that hit every prompt (a template
or a LoRA name). It still counts in the breaker's window: when nearly every prompt is
refused, the cause is the job's setting (max tokens past the context, a KV pool smaller
than the prompts), and pausing before the whole job is failed is the breaker's purpose.
"""

from __future__ import annotations

# Fragments without the numbers, so the token counts of each prompt do not matter.
CONTEXT_REFUSALS = (
    "is longer than the model's context length",
    "exceeds the model's maximum context length",
    "exceeds the maximum allowed length",
    "Multimodal prompt is too long",
)


KIND = "context-length refusal"


def is_context_refusal(message: str) -> bool:
    return any(fragment in message for fragment in CONTEXT_REFUSALS)
