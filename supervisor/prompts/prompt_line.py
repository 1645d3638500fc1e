"""One line of a prompts file, decoded, as a prompt: its shape read (OpenAI messages,
ShareGPT conversations, a bare prompt, MT-bench turns), its trailing answers dropped, its
content checked for something a text model can answer, its id; or BadLine saying why not,
with the kind of refusal (supervisor/prompts/prompt_import.py streams a file through this)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant",
                   "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
                   "bing": "assistant", "model": "assistant", "system": "system"}
_ROLES = {"system", "user", "assistant", "developer", "tool"}


# Why a line was refused, for GROUP BY in the state DB's import_refusals (schema 8).
MALFORMED = "malformed"                 # not JSON, not UTF-8, a shape or type this is not
EMPTY_CONTENT = "empty_content"         # a turn with nothing in it, or only whitespace
NON_TEXT_CONTENT = "non_text_content"   # an image (or typeless) content part
NO_USER_TURN = "no_user_turn"           # nothing for the model to answer


class BadLine(ValueError):
    """A line that cannot become a prompt; the message says why, `kind` classes it."""

    def __init__(self, reason: str, kind: str = MALFORMED) -> None:
        super().__init__(reason)
        self.kind = kind


def stable_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _text_problem(where: str, text: str) -> BadLine | None:
    if text == "":
        return BadLine(f"{where} is empty: nothing to answer", EMPTY_CONTENT)
    if not text.strip():
        return BadLine(f"{where} is only whitespace: nothing to answer", EMPTY_CONTENT)
    return None


def _check_content(where: str, content: Any) -> None:
    """A turn's content the model can read: a non-blank string, or OpenAI's list of content
    parts that are all text, not all blank. The job sends text to a text model, and SGLang
    0.5.23 answers 400 to the rest, once per attempt: a media part to a text-only model is
    "Model only supports text input; received unsupported content type 'image_url'."
    (`sglang/srt/entrypoints/openai/serving_chat.py`, _validate_media_content), a part with
    no type matches none of the content-part models (`protocol.py`,
    ChatCompletionMessageContentPart, each with a `type` literal). Refused here, once, with
    the line; so is a blank turn, which leaves the model nothing to answer."""
    if isinstance(content, str):
        problem = _text_problem(where, content)
        if problem is not None:
            raise problem
        return
    if not isinstance(content, list):
        raise BadLine(f"{where} must be a string or a list of text parts, got "
                      f"{type(content).__name__}")
    if not content:
        raise BadLine(f"{where} is an empty list of parts: nothing to answer", EMPTY_CONTENT)
    texts = []
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            raise BadLine(f"{where}[{i}] is not an object")
        kind = part.get("type")
        if kind != "text":
            what = (f"a part with no type ({json.dumps(part, ensure_ascii=False)[:40]})"
                    if kind is None else f"a part of type {kind!r}")
            raise BadLine(f"{where}[{i}] is {what}: only text parts can be answered",
                          NON_TEXT_CONTENT)
        text = part.get("text")
        if not isinstance(text, str):
            raise BadLine(f"{where}[{i}].text must be a string")
        texts.append(text)
    problem = _text_problem(where, "".join(texts))
    if problem is not None:
        raise problem


@dataclass(frozen=True)
class _Turn:
    role: str
    content: Any
    where: str          # how the line names it: messages[2].content, conversations[1].value


def _from_messages(raw: Any) -> list[_Turn]:
    if not isinstance(raw, list) or not raw:
        raise BadLine("'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise BadLine(f"messages[{i}] is not an object")
        role = m.get("role")
        if role not in _ROLES:
            raise BadLine(f"messages[{i}].role must be one of {sorted(_ROLES)}, got {role!r}")
        out.append(_Turn(role, m.get("content"), f"messages[{i}].content"))
    return out


def _from_conversations(raw: Any) -> list[_Turn]:
    if not isinstance(raw, list) or not raw:
        raise BadLine("'conversations' must be a non-empty list")
    out = []
    for i, turn in enumerate(raw):
        if not isinstance(turn, dict):
            raise BadLine(f"conversations[{i}] is not an object")
        # from/value is ShareGPT's own form; role/content is how SpecForge's regeneration
        # script and many re-exported datasets write the same turns.
        who_key, value_key = ("from", "value") if "from" in turn else ("role", "content")
        who, value = turn.get(who_key), turn.get(value_key)
        role = _SHAREGPT_ROLES.get(who) if isinstance(who, str) else None
        if role is None:
            raise BadLine(f"conversations[{i}].{who_key} {who!r} is not a known speaker")
        if not isinstance(value, str):
            raise BadLine(f"conversations[{i}].{value_key} must be a string")
        out.append(_Turn(role, value, f"conversations[{i}].{value_key}"))
    return out


def _from_turns(raw: Any) -> list[_Turn]:
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], str):
        raise BadLine("'turns' must be a list whose first item is a string")
    return [_Turn("user", raw[0], "turns[0]")]


@dataclass(frozen=True)
class ParsedPrompt:
    id: str
    messages: list[dict[str, Any]]
    # Trailing assistant turns dropped (the answer already in the dataset, regenerated here).
    dropped_answers: int = 0


def parse_line(obj: Any) -> ParsedPrompt:
    """One decoded line as a prompt, or BadLine (with its kind)."""
    if not isinstance(obj, dict):
        raise BadLine("line is not a JSON object")
    if "messages" in obj:
        turns = _from_messages(obj["messages"])
    elif "conversations" in obj:
        turns = _from_conversations(obj["conversations"])
    elif "prompt" in obj:
        if not isinstance(obj["prompt"], str):
            raise BadLine("'prompt' must be a string")
        turns = [_Turn("user", obj["prompt"], "'prompt'")]
    elif "turns" in obj:
        turns = _from_turns(obj["turns"])
    else:
        raise BadLine("no 'messages', 'conversations', 'prompt' or 'turns' field")
    # Dropped, not refused: a ShareGPT-style conversation ends with the dataset's own answer,
    # and regenerating that answer with the served model is what the job is for. Refusing
    # them would refuse nearly every line of such a file. Dropped before the content checks:
    # an empty trailing answer is no reason to refuse the question before it.
    dropped = 0
    while turns and turns[-1].role == "assistant":
        turns.pop()
        dropped += 1
    if not any(t.role == "user" for t in turns):
        raise BadLine("no user turn to answer" + (" (only assistant turns)" if dropped else ""),
                      NO_USER_TURN)
    for t in turns:
        _check_content(t.where, t.content)
    messages = [{"role": t.role, "content": t.content} for t in turns]
    raw_id = obj.get("id", obj.get("question_id"))
    if raw_id is None:
        prompt_id = "h-" + stable_hash(json.dumps(messages, ensure_ascii=False,
                                                  separators=(",", ":"), sort_keys=True))[:32]
    elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) and str(raw_id):
        prompt_id = str(raw_id)
    else:
        raise BadLine(f"'id' must be a non-empty string or an integer, got {raw_id!r}")
    return ParsedPrompt(prompt_id, messages, dropped)


def parse_prompt(obj: Any) -> tuple[str, list[dict[str, Any]]]:
    """(id, messages) for one decoded line, or BadLine."""
    parsed = parse_line(obj)
    return parsed.id, parsed.messages
