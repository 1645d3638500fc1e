"""POST /v1/chat/completions (non-streaming) in SGLang 0.5.23's shapes.

Response (`sglang/srt/entrypoints/openai/protocol.py` ChatCompletionResponse): {id, object
"chat.completion", created, model, choices: [{index, message: {role, content,
reasoning_content}, logprobs, finish_reason, matched_stop}], usage: {prompt_tokens,
total_tokens, completion_tokens, prompt_tokens_details, reasoning_tokens,
completion_tokens_details}, metadata}. ChatMessage drops `tool_calls` when there are none;
`matched_stop` is the stop token id (an int) when the model stopped by itself, null when cut
by length. Errors are SGLang's ErrorResponse: {object "error", message, type, param, code}.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .batch_slots import Aborted, BatchSlots
from .decode_meter import DecodeMeter
from .faults import FaultState
from .filler_text import count_prompt_tokens, filler
from .inflight import InFlight
from .kv_pool import Seat
from .looping_text import LoopPlan, list_text, loop_plan, looping_text, numbered_list, prompt_words
from .options import SimOptions
from .output_plan import (
    OutputPlan,
    is_empty,
    natural_length,
    plan_output,
    prompt_digest,
    text_offset,
)
from .reasoning_split import raw_output, split_reasoning, thinking_mode, usage

# Qwen3's <|im_end|>: the token a finished answer stops on, reported as matched_stop.
EOS_TOKEN_ID = 151645
# protocol.py DEFAULT_MODEL_NAME: what `model` is when the request leaves it out.
DEFAULT_MODEL_NAME = "default"
# The scheduler's abort of the last request of a decode batch still out of memory after
# retracting all the others (`sglang/srt/managers/schedule_batch.py` retract_decode), with
# status_code HTTPStatus.INTERNAL_SERVER_ERROR: the error share's answer (faults.py).
SCHEDULER_OOM_ABORT = ("Out of memory even after retracting all other requests in the "
                       "decode batch. Aborting the last request.")
# The finish_reason of a generation aborted with an error status (never sent as such: the
# client gets the error instead).
ERRORED = "error"


class BadRequest(Exception):
    """Becomes HTTP 400 with SGLang's error body."""

    def __init__(self, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.kind = kind


def error_body(message: str, code: int = 400, kind: str = "BadRequestError") -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, Any]]
    model: str
    max_tokens: int | None
    thinking: bool                     # the simulated model thinks (its chat template's choice)
    separate_reasoning: bool
    chat_template_kwargs: dict[str, Any]
    stream: bool = False
    include_usage: bool = False
    rid: str | None = None
    continuous_usage: bool = False     # stream_options.continuous_usage_stats
    ignore_eos: bool = False           # generate max tokens whatever the model would say


def _int_or_none(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{key} must be a non-negative integer, got {value!r}", "Bad Request")
    return value


def parse_request(body: Any) -> ChatRequest:
    """Request validation failures are FastAPI validation errors, which SGLang answers with
    400 and type "Bad Request" (`sglang/srt/entrypoints/http_server.py`
    validation_exception_handler)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object", "Bad Request")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: Field required (a non-empty list)", "Bad Request")
    # protocol.py to_sampling_params: max_new_tokens = max_completion_tokens or max_tokens
    # (an `or`, so a 0 falls through to max_tokens).
    max_tokens = _int_or_none(body, "max_completion_tokens") or _int_or_none(body, "max_tokens")
    kwargs = body.get("chat_template_kwargs") or {}
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    separate = body.get("separate_reasoning", True) is not False
    # The simulated model (Qwen3's template): enable_thinking decides, and a request that
    # says nothing thinks, as the template's default is on; only false turns it off.
    enable = kwargs.get("enable_thinking")
    thinking = bool(enable) if enable is not None else True
    model = body.get("model")
    options = body.get("stream_options") or {}
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise BadRequest("rid: only a single request id (a string) is simulated", "Bad Request")
    return ChatRequest(messages, model if isinstance(model, str) else DEFAULT_MODEL_NAME,
                       max_tokens, thinking, separate, kwargs, bool(body.get("stream")),
                       isinstance(options, dict) and bool(options.get("include_usage")),
                       rid or None,
                       isinstance(options, dict) and bool(options.get("continuous_usage_stats")),
                       body.get("ignore_eos") is True)


def _check_model(model: str, served_name: str) -> None:
    """`model` "base:adapter" asks for a LoRA adapter (`sglang/srt/entrypoints/openai/
    serving_base.py` _parse_model_parameter); without --enable-lora the tokenizer manager
    refuses it (`sglang/srt/managers/tokenizer_manager.py`)."""
    if ":" not in model or model == served_name:
        return
    if model.startswith(served_name + ":"):
        adapter = model[len(served_name) + 1:].strip()
    else:
        adapter = model.split(":", 1)[1].strip()
    if adapter:
        raise BadRequest(f"LoRA adapter '{adapter}' was requested, but LoRA is not enabled. "
                         "Please launch the server with --enable-lora flag and preload "
                         "adapters using --lora-paths or /load_lora_adapter endpoint.")


def check_lengths(opts: SimOptions, prompt_tokens: int, max_tokens: int | None,
                  chat: bool = True) -> int | None:
    """SGLang's length checks, in its order. Returns the max new tokens to use.

    `serving_chat.py` _validate_request (chat only): max tokens over the context length is
    refused before anything else (allowed with --allow-auto-truncate). `tokenizer_manager.py`
    _validate_one_request: a prompt of >= context tokens is refused (truncated with
    --allow-auto-truncate); prompt + max new tokens > context is refused (the budget is
    shrunk with --allow-auto-truncate) -- `>=` for the input, `>` for the total."""
    ctx = opts.context_length
    if chat and max_tokens and max_tokens > ctx and not opts.allow_auto_truncate:
        raise BadRequest(f"max_completion_tokens is too large: {max_tokens}."
                         f"This model supports at most {ctx} completion tokens.")
    if prompt_tokens >= ctx and not opts.allow_auto_truncate:
        raise BadRequest(f"The input ({prompt_tokens} tokens) is longer than the model's "
                         f"context length ({ctx} tokens).")
    prompt_tokens = min(prompt_tokens, ctx)
    if max_tokens is not None and max_tokens + prompt_tokens > ctx:
        if not opts.allow_auto_truncate:
            raise BadRequest(
                "Requested token count exceeds the model's maximum context length of "
                f"{ctx} tokens. You requested a total of {max_tokens + prompt_tokens} "
                f"tokens: {prompt_tokens} tokens from the input messages and {max_tokens} "
                "tokens for the completion. Please reduce the number of tokens in the input "
                "messages or the completion to fit within the limit.")
        max_tokens = max(0, ctx - prompt_tokens)
    return max_tokens


def scheduler_refusal(opts: SimOptions, prompt_tokens: int) -> str | None:
    """The scheduler's own input check, after the tokenizer manager's (`sglang/srt/managers/
    utils.py`:270-287 validate_input_length): an input of max_req_input_len tokens or more
    (min(context - 1, KV pool - 1) - 5) is aborted with HTTP 400 -- streamed, that comes
    after the 200 (chat_stream.py). With --allow-auto-truncate the input is cut instead."""
    limit = opts.max_req_input_len
    if prompt_tokens < limit or opts.allow_auto_truncate:
        return None
    return (f"Input length ({prompt_tokens} tokens) exceeds the maximum allowed length "
            f"({limit} tokens). Use a shorter input or enable --allow-auto-truncate.")


def _texts(plan: OutputPlan, req: ChatRequest, offset: int, loop: LoopPlan | None,
           listed: bool) -> tuple[str | None, str]:
    """(thought or None when not thinking, answer) as the model wrote them."""
    if loop is not None or listed:
        # Loops and lists are built whole, then split where the thinking ended.
        text = (looping_text(plan.completion_tokens, offset, loop, prompt_words(req.messages))
                if loop is not None else list_text(plan.completion_tokens, offset))
        if not req.thinking:
            return None, text
        words = text.split(" ")
        return " ".join(words[:plan.reasoning_tokens]), " ".join(words[plan.reasoning_tokens:])
    thought = filler(plan.reasoning_tokens, offset) if req.thinking else None
    return thought, filler(plan.answer_tokens, offset + plan.reasoning_tokens + 7)


@dataclass(frozen=True)
class Completion:
    """One finished generation, before it is shaped as a response or a stream."""
    rid: str
    created: int
    model: str
    content: str
    reasoning_content: str | None
    finish_reason: str
    matched_stop: int | None
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    # What the model wrote and how it is parsed, so an aborted generation can be cut short.
    thought: str | None = None
    answer: str = ""
    split: bool = False                # --reasoning-parser and separate_reasoning
    force_reasoning: bool = False      # the request is a reasoning one (counts its tokens)
    stuck: bool = False                # in the stall share (faults.py): hangs halfway
    errors: bool = False               # in the error share (faults.py): aborted halfway
    budget: int = 0                    # the max new tokens the scheduler plans for
    # The scheduler's refusal of an input too long for its KV pool (check_lengths).
    refusal: str | None = None
    ignore_eos: bool = False

    def seat(self) -> Seat:
        """Its claim on the scheduler's KV pool (kv_pool.py)."""
        return Seat(self.prompt_tokens, max(self.budget, self.completion_tokens),
                    self.ignore_eos)

    def cut(self, produced: int, *, queued: bool) -> Completion:
        """The generation aborted after `produced` tokens (`/abort_request`): finish_reason
        "abort" with no matched stop. Aborted in the waiting queue, SGLang's tokenizer manager
        reports no prompt tokens either (`sglang/srt/managers/tokenizer_manager.py`
        _handle_abort_req builds meta_info without them)."""
        produced = max(0, min(produced, self.completion_tokens))
        thought_words = self.thought.split(" ") if self.thought else []
        if self.thought is not None and produced <= len(thought_words):
            text = raw_output(" ".join(thought_words[:produced]), "", False)
        else:
            rest = produced - len(thought_words)
            text = raw_output(self.thought, " ".join(self.answer.split(" ")[:rest]), True)
        if produced == 0:
            text = ""
        if self.split:
            parsed = split_reasoning(text, force_reasoning=self.force_reasoning)
            content, reasoning = parsed.content, parsed.reasoning_content
        else:
            content, reasoning = text, None
        reasoning_tokens = min(produced, self.reasoning_tokens)
        return replace(self, content=content, reasoning_content=reasoning,
                       finish_reason="abort", matched_stop=None,
                       prompt_tokens=0 if queued else self.prompt_tokens,
                       completion_tokens=produced, reasoning_tokens=reasoning_tokens)

    def failed(self, produced: int) -> Completion:
        """Aborted by the scheduler with an error status after `produced` tokens."""
        return replace(self.cut(produced, queued=False), finish_reason=ERRORED)

    def usage(self) -> dict[str, Any]:
        return usage(self.prompt_tokens, self.completion_tokens, self.reasoning_tokens)

    def response(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content,
                                   "reasoning_content": self.reasoning_content}
        return {
            "id": self.rid, "object": "chat.completion", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": self.finish_reason,
                         "matched_stop": self.matched_stop}],
            "usage": self.usage(),
            "metadata": {"weight_version": "default", "weight_versions": [
                {"version": "default", "start": 0, "end": self.completion_tokens}]},
        }


class ChatHandler:
    def __init__(self, opts: SimOptions, slots: BatchSlots, faults: FaultState,
                 on_finished: Callable[[int, int, bool], None],
                 meter: DecodeMeter | None = None) -> None:
        self.inflight = InFlight()
        self.meter = meter or DecodeMeter(opts.tokens_per_s, opts.time_scale, opts.instant)
        self.opts = opts
        self.slots = slots
        self.faults = faults
        self.on_finished = on_finished
        # Told of each abort SGLang's tokenizer manager sends to the scheduler
        # (sglang:num_aborted_requests_total).
        self.on_abort: Callable[[], None] | None = None

    def decode_seconds(self, tokens: int) -> float:
        """How long `tokens` take one request at the present decode speed."""
        return self.meter.seconds_for(tokens)

    def prepare(self, body: Any) -> tuple[ChatRequest, Completion]:
        """Validate the request and decide the whole generation (it is a pure function of
        the prompt); raises BadRequest with SGLang's message."""
        req = parse_request(body)
        opts = self.opts
        _check_model(req.model, opts.model_name)
        if req.rid is not None and req.rid in self.inflight:
            raise BadRequest(f"Duplicate request ID detected: {req.rid}")
        prompt_tokens = count_prompt_tokens(req.messages)
        max_tokens = check_lengths(opts, prompt_tokens, req.max_tokens)
        prompt_tokens = min(prompt_tokens, opts.context_length)
        digest = prompt_digest(req.messages, opts.seed)
        if is_empty(digest, self.faults.empty_rate):
            # The broken case: the model ends at once, nothing to split.
            plan = OutputPlan(1, 0, 0, "stop", True)
            thought, answer = None, ""
        else:
            natural = natural_length(digest)
            loop = loop_plan(digest, natural, opts.loop_share, len(prompt_words(req.messages)))
            plan = plan_output(digest, max_tokens=max_tokens, thinking=req.thinking,
                               room=opts.context_length - prompt_tokens,
                               looping=loop is not None or req.ignore_eos)
            thought, answer = _texts(plan, req, text_offset(digest), loop,
                                     loop is None and opts.loop_share > 0
                                     and numbered_list(digest, natural))
        text = raw_output(thought, answer, plan.thinking_finished)
        reasoning_mode = thinking_mode(req.chat_template_kwargs, opts.reasoning_parser)
        if opts.reasoning_parser and req.separate_reasoning:
            split = split_reasoning(text, force_reasoning=reasoning_mode)
            content, reasoning = split.content, split.reasoning_content
        else:
            content, reasoning = text, None
        # The scheduler counts reasoning tokens only for a reasoning request (parser set).
        reasoning_tokens = plan.reasoning_tokens if reasoning_mode and thought is not None else 0
        refusal = scheduler_refusal(opts, prompt_tokens)
        return req, Completion(
            rid=req.rid or uuid.uuid4().hex, created=int(time.time()), model=req.model,
            content=content, reasoning_content=reasoning, finish_reason=plan.finish_reason,
            matched_stop=EOS_TOKEN_ID if plan.finish_reason == "stop" else None,
            prompt_tokens=prompt_tokens, completion_tokens=plan.completion_tokens,
            reasoning_tokens=reasoning_tokens, thought=thought, answer=answer,
            split=bool(opts.reasoning_parser) and req.separate_reasoning,
            force_reasoning=reasoning_mode, stuck=self.faults.stalls(digest),
            errors=self.faults.errors(digest),
            budget=opts.context_length - prompt_tokens if max_tokens is None else max_tokens,
            ignore_eos=req.ignore_eos, refusal=refusal)

    def on_disconnect(self) -> None:
        """A streaming client went away mid-answer: SGLang aborts its request."""
        if self.on_abort is not None:
            self.on_abort()

    async def decode(self, done: Completion, streaming: bool = False) -> Completion:
        """Hold a place in the batch for as long as decoding `done` takes (back in the queue
        whenever the scheduler retracts it), then count it. Returns `done`, or what was
        produced when /abort_request stopped it first."""
        with self.inflight.track(done.rid) as flight:
            produced = 0
            try:
                async with self.slots.slot(done.seat(), abort=flight.aborted) as seat:
                    halfway = done.stuck or done.errors
                    target = done.completion_tokens // 2 if halfway else done.completion_tokens
                    while produced < target and not flight.aborted.is_set():
                        with self.slots.decoding(seat):
                            produced += await self.meter.decode(
                                target - produced, flight.aborted, seat.retracted)
                        self.slots.pool.set_generated(seat, produced)
                        if seat.retracted.is_set() and not flight.aborted.is_set():
                            await self.slots.readmit(seat, flight.aborted)
                    if done.stuck:
                        await flight.aborted.wait()    # stuck halfway until aborted
                    if flight.aborted.is_set():
                        # Aborted while running: SGLang lets it run one more forward pass.
                        done = done.cut(produced + 1, queued=False)
                    elif done.errors:
                        done = done.failed(produced)
            except Aborted:
                done = done.cut(produced, queued=produced == 0)
        self.slots.finished(done.prompt_tokens, done.completion_tokens)
        self.on_finished(done.prompt_tokens, done.completion_tokens, streaming)
        return done

    async def complete(self, body: Any) -> dict[str, Any]:
        _, done = self.prepare(body)
        return (await self.decode(done)).response()
