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
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from .batch_slots import Aborted, BatchSlots
from .chat_input import IdsWanted, InputError, ModelInput, ids_wanted, model_input
from .decode_meter import DecodeMeter
from .faults import FaultState
from .filler_text import filler
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
from .toy_tokenizer import IM_END, encode_piece, pieces

# Qwen3's <|im_end|>: the token a finished answer stops on, reported as matched_stop.
EOS_TOKEN_ID = IM_END
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


BadRequest = InputError       # becomes HTTP 400 with SGLang's error body


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
    wanted: IdsWanted = IdsWanted()    # the ids to send back in `sglext`
    body: dict[str, Any] = field(default_factory=dict)


def _int_or_none(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{key} must be a non-negative integer, got {value!r}", "Bad Request")
    return value


def parse_request(body: Any, headers: Any = None) -> ChatRequest:
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
                       body.get("ignore_eos") is True, ids_wanted(body, headers), body)


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


def _texts(plan: OutputPlan, given: ModelInput, offset: int, loop: LoopPlan | None,
           listed: bool) -> tuple[str | None, str]:
    """(thought or None when not thinking, answer) as the model wrote them."""
    if loop is not None or listed:
        # Loops and lists are built whole, then split where the thinking ended.
        text = (looping_text(plan.completion_tokens, offset, loop, prompt_words(given.messages))
                if loop is not None else list_text(plan.completion_tokens, offset))
        if not given.thinking:
            return None, text
        tokens = pieces(text)
        answer = "".join(tokens[plan.reasoning_tokens:])
        return "".join(tokens[:plan.reasoning_tokens]), answer[1:] if answer else answer
    thought = filler(plan.reasoning_tokens, offset) if given.thinking else None
    return thought, filler(plan.answer_tokens, offset + plan.reasoning_tokens + 7)


def parse_output(raw: str, split: bool, force_reasoning: bool,
                 previous: str | None) -> tuple[str, str | None]:
    """(content, reasoning_content) of raw output text, as the response carries them."""
    if not split:
        return raw, None
    parsed = split_reasoning(raw, force_reasoning=force_reasoning, previous=previous)
    return parsed.content, parsed.reasoning_content


def _continued(whole: OutputPlan, before: int) -> OutputPlan:
    """The part of `whole` after its first `before` tokens. Reasoning tokens are counted as
    SGLang's scheduler counts them (`sglang/srt/managers/schedule_batch.py`
    update_reasoning_tokens): every token until the one that ends the thought, so a
    continuation that begins after the thought ended counts all its tokens as reasoning (the
    scheduler does not look at the tokens it was given)."""
    if before >= whole.completion_tokens:
        return OutputPlan(1, 0, 0, "stop", True)
    produced = whole.completion_tokens - before
    ended = whole.answer_tokens > 0
    think = produced if ended and before > whole.reasoning_tokens else (
        whole.reasoning_tokens - before)
    return OutputPlan(produced, think, produced - think, whole.finish_reason,
                      whole.thinking_finished)


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
    # What the model wrote (this request's part) and how it is parsed, so an aborted
    # generation can be cut short and its tokens given back.
    raw: str = ""
    split: bool = False                # --reasoning-parser and separate_reasoning
    force_reasoning: bool = False      # the request is a reasoning one (counts its tokens)
    previous: str | None = None        # the parser's previous_content (continue_final_message)
    input_ids: tuple[int, ...] = ()
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

    @cached_property
    def pieces(self) -> list[str]:
        """This request's output, one text per token (toy_tokenizer.py)."""
        return pieces(self.raw)

    def output_ids(self) -> list[int]:
        """The sampled ids; an answer that stopped with no text at all (the empty share)
        sampled only the stop token."""
        ids = [encode_piece(p) for p in self.pieces[:self.completion_tokens]]
        return ids + [EOS_TOKEN_ID] * (self.completion_tokens - len(ids))

    def cut(self, produced: int, *, queued: bool) -> Completion:
        """The generation aborted after `produced` tokens (`/abort_request`): finish_reason
        "abort" with no matched stop. Aborted in the waiting queue, SGLang's tokenizer manager
        reports no prompt tokens either (`sglang/srt/managers/tokenizer_manager.py`
        _handle_abort_req builds meta_info without them)."""
        produced = max(0, min(produced, self.completion_tokens))
        raw = "".join(self.pieces[:produced])
        content, reasoning = parse_output(raw, self.split, self.force_reasoning, self.previous)
        reasoning_tokens = min(produced, self.reasoning_tokens)
        return replace(self, content=content, reasoning_content=reasoning,
                       finish_reason="abort", matched_stop=None,
                       prompt_tokens=0 if queued else self.prompt_tokens,
                       completion_tokens=produced, reasoning_tokens=reasoning_tokens, raw=raw)

    def failed(self, produced: int) -> Completion:
        """Aborted by the scheduler with an error status after `produced` tokens."""
        return replace(self.cut(produced, queued=False), finish_reason=ERRORED)

    def usage(self) -> dict[str, Any]:
        return usage(self.prompt_tokens, self.completion_tokens, self.reasoning_tokens)

    def sglext(self, wanted: IdsWanted) -> dict[str, Any] | None:
        """The ids asked for, as SglExt serializes them (None fields left out); none after an
        error abort (serving_chat.py ~2716-2724)."""
        if self.finish_reason == ERRORED:
            return None
        ext: dict[str, Any] = {}
        if wanted.input_ids and self.input_ids:
            ext["input_ids"] = list(self.input_ids)
        if wanted.output_ids:
            ext["output_ids"] = [self.output_ids()]
        return ext or None

    def response(self, wanted: IdsWanted | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content,
                                   "reasoning_content": self.reasoning_content}
        out = {
            "id": self.rid, "object": "chat.completion", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": self.finish_reason,
                         "matched_stop": self.matched_stop}],
            "usage": self.usage(),
            "metadata": {"weight_version": "default", "weight_versions": [
                {"version": "default", "start": 0, "end": self.completion_tokens}]},
        }
        ext = self.sglext(wanted) if wanted is not None else None
        if ext is not None:
            # Unstreamed, the ids ride on the response itself (serving_chat.py ~2877-2896).
            out["sglext"] = ext
        return out


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

    def prepare(self, body: Any, headers: Any = None) -> tuple[ChatRequest, Completion]:
        """Validate the request and decide the whole generation (it is a pure function of
        the prompt, and of the answer tokens already in `input_ids`); raises BadRequest with
        SGLang's message."""
        req = parse_request(body, headers)
        opts = self.opts
        _check_model(req.model, opts.model_name)
        if req.rid is not None and req.rid in self.inflight:
            raise BadRequest(f"Duplicate request ID detected: {req.rid}")
        given = model_input(req.body, req.messages, req.thinking)
        prompt_tokens = len(given.ids)
        max_tokens = check_lengths(opts, prompt_tokens, req.max_tokens)
        prompt_tokens = min(prompt_tokens, opts.context_length)
        before = given.before
        digest = prompt_digest(given.messages, opts.seed)
        if is_empty(digest, self.faults.empty_rate):
            # The broken case: the model ends at once, nothing to split.
            plan = OutputPlan(1, 0, 0, "stop", True)
            thought, answer = None, ""
        else:
            natural = natural_length(digest)
            loop = loop_plan(digest, natural, opts.loop_share, len(prompt_words(given.messages)))
            # The whole answer as one request would write it, the tokens already given
            # counted in its limit and in the room the context leaves.
            plan = plan_output(digest, max_tokens=None if max_tokens is None
                               else before + max_tokens,
                               thinking=given.thinking,
                               room=opts.context_length - prompt_tokens + before,
                               looping=loop is not None or req.ignore_eos)
            thought, answer = _texts(plan, given, text_offset(digest), loop,
                                     loop is None and opts.loop_share > 0
                                     and numbered_list(digest, natural))
        text = raw_output(thought, answer, plan.thinking_finished) if plan.completion_tokens else ""
        if before:
            # Continued: the model goes on after the tokens it was given. Given as many as
            # it would ever write, its next token is the stop token.
            text = "".join(pieces(text)[before:])
            plan = _continued(plan, before)
        reasoning_mode = thinking_mode(req.chat_template_kwargs, opts.reasoning_parser)
        split = bool(opts.reasoning_parser) and req.separate_reasoning
        content, reasoning = parse_output(text, split, reasoning_mode, given.previous)
        reasoning_tokens = plan.reasoning_tokens if reasoning_mode and given.thinking else 0
        refusal = scheduler_refusal(opts, prompt_tokens)
        return req, Completion(
            rid=req.rid or uuid.uuid4().hex, created=int(time.time()), model=req.model,
            content=content, reasoning_content=reasoning, finish_reason=plan.finish_reason,
            matched_stop=EOS_TOKEN_ID if plan.finish_reason == "stop" else None,
            prompt_tokens=prompt_tokens, completion_tokens=plan.completion_tokens,
            reasoning_tokens=reasoning_tokens, raw=text, split=split,
            force_reasoning=reasoning_mode, previous=given.previous,
            input_ids=tuple(given.ids), stuck=self.faults.stalls(digest),
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
        req, done = self.prepare(body)
        return (await self.decode(done)).response(req.wanted)
