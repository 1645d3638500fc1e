"""What the simulated model is given on the chat route: the messages through the chat
template, or `input_ids` that skip it -- a prompt and, after it, the answer so far.

SGLang 0.5.23 (`sglang/srt/entrypoints/openai/serving_chat.py` _process_messages, ~1945):
with `input_ids` the template is skipped entirely and the ids are the prompt; the messages
are still required and still read, for the reasoning parser: with `continue_final_message`
and a last assistant message, its text is the parser's `previous_content`, which sets the
state it starts in (`sglang/srt/parser/reasoning_parser.py` ReasoningParser.__init__,
~2355-2362). The simulated model reads the ids back (toy_tokenizer.py): the prompt decides
the answer, the answer tokens already in the input decide where it goes on from, so a
continued answer is the rest of the answer the same prompt gets in one go.

The ids the request may ask back (`sglext`): the `x-sglext-return-input-ids: 1` /
`x-sglext-return-output-ids: 1` headers or the body's `return_input_ids_in_sglext` /
`return_output_ids_in_sglext` (serving_chat.py ~1283-1289; protocol.py ~965).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .toy_tokenizer import TokenError, canonical_messages, decode_input, encode_prompt


class InputError(ValueError):
    """A chat request whose input the simulator cannot take (a 400)."""

    def __init__(self, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class IdsWanted:
    input_ids: bool = False
    output_ids: bool = False


def ids_wanted(body: Mapping[str, Any], headers: Mapping[str, str] | None) -> IdsWanted:
    headers = headers or {}
    return IdsWanted(
        body.get("return_input_ids_in_sglext") is True
        or headers.get("x-sglext-return-input-ids") == "1",
        body.get("return_output_ids_in_sglext") is True
        or headers.get("x-sglext-return-output-ids") == "1")


@dataclass(frozen=True)
class ModelInput:
    messages: list[dict[str, str]]      # the prompt as the model saw it (role, text)
    thinking: bool                      # the template left the thought to the model
    ids: list[int]                      # every input id: usage.prompt_tokens is its count
    before: int                         # answer tokens already at the end of the ids
    previous: str | None                # the reasoning parser's previous_content


def _int_list(value: Any) -> list[int] | None:
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return None
    return value


def model_input(body: Mapping[str, Any], messages: list[Any], thinking: bool) -> ModelInput:
    """The model's input for a parsed request (`thinking`: the template's choice from
    chat_template_kwargs, used when the template runs)."""
    previous = None
    last = messages[-1] if messages else None
    continue_final = body.get("continue_final_message") is True
    if continue_final and isinstance(last, dict) and last.get("role") == "assistant":
        content = last.get("content")
        previous = content if isinstance(content, str) else None
    raw_ids = body.get("input_ids")
    if raw_ids is None:
        if continue_final:
            raise InputError("continue_final_message without input_ids is not simulated: "
                             "send the prompt's and the answer's ids as input_ids")
        try:
            ids = encode_prompt(messages, thinking=thinking)
        except TokenError as exc:
            raise InputError(str(exc), "Bad Request") from None
        return ModelInput(canonical_messages(messages), thinking, ids, 0, previous)
    ids = _int_list(raw_ids)
    if ids is None:
        raise InputError("input_ids must be a non-empty list of non-negative integers",
                         "Bad Request")
    try:
        decoded = decode_input(ids)
    except TokenError as exc:
        raise InputError(str(exc)) from None
    return ModelInput(decoded.messages, decoded.thinking, ids, len(decoded.output), previous)
