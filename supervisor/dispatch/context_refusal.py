"""Which HTTP 400 answers are SGLang refusing one prompt for its length.

Those are the only errors that are the prompt's own fault for good: the same prompt is
refused the same way at every attempt, while the rest of the job runs. Every other 400
(a chat-template error, `job.model` with a `:` read as a LoRA adapter, a sampling setting
the server rejects) says nothing about the prompt and is as likely to hit every prompt.

SGLang 0.5.23 answers a chat completion with HTTP 400 and {"object":"error","message":...}
for any ValueError (sglang/srt/entrypoints/openai/serving_base.py `handle_request`, and
serving_chat.py `_handle_non_streaming_request`). The length refusals among them:
- sglang/srt/managers/tokenizer_manager.py `_validate_one_request`:
  "The input (N tokens) is longer than the model's context length (C tokens)."
  "Requested token count exceeds the model's maximum context length of C tokens. You
  requested a total of T tokens: ..." (input plus max tokens past the context)
- sglang/srt/managers/utils.py `validate_input_length`, raised in the scheduler and turned
  into a 400 by tokenizer_manager.py `_handle_abort_finish_reason`:
  "Input length (N tokens) exceeds the maximum allowed length (M tokens). Use a shorter
  input or enable --allow-auto-truncate."
- sglang/srt/managers/scheduler.py (multimodal inputs, the same path):
  "Multimodal prompt is too long after expanding multimodal tokens. ..."
"""

from __future__ import annotations

# Fragments without the numbers, so the token counts of each prompt do not matter.
CONTEXT_REFUSALS = (
    "is longer than the model's context length",
    "exceeds the model's maximum context length",
    "exceeds the maximum allowed length",
    "Multimodal prompt is too long",
)


def is_context_refusal(message: str) -> bool:
    return any(fragment in message for fragment in CONTEXT_REFUSALS)
