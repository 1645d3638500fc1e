"""The simulated model's tokenizer: deterministic and reversible, so token ids can travel
(SGLang's `sglext` ids, `input_ids` on the chat route, /v1/tokenize, /detokenize) and come
back meaning the same prompt and the same output in any simulator process.

Real ids are the tokenizer's business; what the daemon relies on is their shape (lists of
ints, one per token) and that decoding them gives the text back. So:

- A prompt is Qwen3's chat template, one token per piece: `<|im_start|>` (151644), the role
  with its newline, the content packed 4 ASCII characters to a token (one token per other
  character), `<|im_end|>` (151645, folded into the content's last short group so the count
  stays ~4 characters a token plus 4 per message), a newline (198); then `<|im_start|>` and
  `assistant\\n` (with `<think>\\n\\n</think>\\n\\n` when thinking is off, as the template
  adds). The prompt's count is usage.prompt_tokens.
- An output token is one word of the simulated model (one word is one token, filler_text.py)
  with the separator before it, the reasoning markers folded into the separators (the first
  thought word carries `<think>\\n`, the first answer word `\\n</think>\\n\\n`): the ids'
  count is completion_tokens and their text is the raw output, so decoding a prefix gives
  the output cut there, and `input_ids` = prompt ids + output ids says exactly where an
  answer stopped. Numbers of a numbered list ("12.") are tokens; a word the model echoes
  from the prompt is at most 3 bytes (looping_text.py).

Every id is below 2**31 (4 bytes a token, signed or not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

IM_START = 151644
IM_END = 151645                 # also the EOS token: matched_stop of a finished answer
NEWLINE = 198
_SPECIAL_TEXT = {IM_START: "<|im_start|>", IM_END: "<|im_end|>"}
ROLES = ("system", "user", "assistant", "tool", "function", "developer")
_ROLE_BASE = 152000
GEN_THINK = 152100              # "assistant\n": the model opens its own <think>
GEN_NO_THINK = 152101           # enable_thinking false: the template closes the thought
_GEN_TEXT = {GEN_THINK: "assistant\n", GEN_NO_THINK: "assistant\n<think>\n\n</think>\n\n"}

_ASCII4 = 1 << 28               # 4 ASCII characters, 7 bits each
_SHORT = 1 << 29                # 1-3 ASCII characters (+ <|im_end|> when flagged)
_WIDE = (1 << 29) + (1 << 24)   # one non-ASCII character
_OUT = 1 << 30                  # output tokens: separator * 2**27 + core

# The words the simulated model writes (filler_text.py), one token each: the vocabulary.
WORDS = (
    "the of and to in is that it for as with was on be by this are or from at an which "
    "we can if so not but have model token step then first next value each let case check "
    "thus since result answer number because given means consider total think compute "
    "should would could there their about into more also only other some such time these "
    "way use when what where while why how all any both few most many much must need"
).split()
SEPARATORS = ("", " ", "\n", "<think>\n", "\n</think>\n\n")
_VOCAB = tuple(WORDS) + tuple(w + "." for w in WORDS)
_VOCAB_INDEX = {w: i for i, w in enumerate(_VOCAB)}
_NUMBER = 1 << 16               # core 2**16 + k: "k."
_ECHO = 1 << 26                 # core 2**26 + n * 2**24 + bytes: 1-3 bytes of UTF-8
ECHO_BYTES = 3
# One output token as text: its separator, then one word (no whitespace in it).
PIECE = re.compile(r"(<think>\n|\n</think>\n\n| |\n)?(\S+)")
_NUMBER_WORD = re.compile(r"[1-9][0-9]{0,3}\.")


class TokenError(ValueError):
    """Ids or text the toy tokenizer cannot take; the message names the problem."""


def _pack(chars: str) -> int:
    value = 0
    for ch in chars:
        value = (value << 7) | ord(ch)
    return value


def _unpack(value: int, n: int) -> str:
    return "".join(chr((value >> (7 * (n - 1 - i))) & 0x7F) for i in range(n))


def encode_text(text: str, *, close_message: bool = False) -> list[int]:
    """Plain text: runs of ASCII in groups of 4, every other character alone. With
    close_message the message's `<|im_end|>` follows, folded into a last short group."""
    ids: list[int] = []
    run = ""

    def flush(final: bool) -> None:
        nonlocal run
        for at in range(0, len(run) - len(run) % 4, 4):
            ids.append(_ASCII4 + _pack(run[at:at + 4]))
        rest = run[len(run) - len(run) % 4:]
        if rest:
            end = 1 if final and close_message else 0
            ids.append(_SHORT + (end << 23) + (len(rest) << 21) + _pack(rest))
        run = ""

    for ch in text:
        if ord(ch) < 128:
            run += ch
            continue
        flush(False)
        ids.append(_WIDE + ord(ch))
    folded = bool(run) and len(run) % 4 != 0
    flush(True)
    if close_message and not folded:
        ids.append(IM_END)
    return ids


def message_text(message: Any) -> str:
    """The text a message's content renders to (a string, or OpenAI text parts)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text", ""), str))
    return ""


def canonical_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """What of the messages reaches the model: role and text (the template drops the rest)."""
    return [{"role": m.get("role") if isinstance(m, dict) else None,
             "content": message_text(m)} for m in messages]


def encode_prompt(messages: list[Any], *, thinking: bool) -> list[int]:
    """The chat template's ids for the messages, ready for the assistant's answer."""
    ids: list[int] = []
    for i, m in enumerate(canonical_messages(messages)):
        role = m["role"]
        if role not in ROLES:
            raise TokenError(f"messages[{i}].role must be one of {', '.join(ROLES)}, "
                             f"got {role!r}")
        ids += [IM_START, _ROLE_BASE + ROLES.index(role)]
        ids += encode_text(m["content"], close_message=True)
        ids.append(NEWLINE)
    ids += [IM_START, GEN_THINK if thinking else GEN_NO_THINK]
    return ids


@dataclass(frozen=True)
class DecodedInput:
    """`input_ids` read back: the prompt, and the answer tokens already after it."""
    messages: list[dict[str, str]]
    thinking: bool
    prompt_len: int             # ids up to and including the generation prompt
    output: list[str]           # the answer's pieces already in the input


def decode_input(ids: list[int]) -> DecodedInput:
    """Inverse of encode_prompt (+ output ids); TokenError names the first id that does not
    fit, as these ids can only come from this tokenizer."""
    messages: list[dict[str, str]] = []
    at = 0
    while True:
        if at + 1 >= len(ids) or ids[at] != IM_START:
            raise TokenError(f"input_ids[{at}]: expected <|im_start|> ({IM_START}): not a "
                             "prompt the simulator's chat template made")
        head = ids[at + 1]
        if head in _GEN_TEXT:
            prompt_len = at + 2
            output = [decode_output_id(t, i) for i, t in
                      enumerate(ids[prompt_len:], start=prompt_len)]
            return DecodedInput(messages, head == GEN_THINK, prompt_len, output)
        if not _ROLE_BASE <= head < _ROLE_BASE + len(ROLES):
            raise TokenError(f"input_ids[{at + 1}]: {head} is not a role token")
        at += 2
        text: list[str] = []
        while True:
            if at >= len(ids):
                raise TokenError("input_ids end inside a message (no <|im_end|>)")
            tid = ids[at]
            at += 1
            if tid == IM_END:
                break
            piece, closes = _content_piece(tid, at - 1)
            text.append(piece)
            if closes:
                break
        if at >= len(ids) or ids[at] != NEWLINE:
            raise TokenError(f"input_ids[{at}]: expected the newline after <|im_end|>")
        at += 1
        messages.append({"role": ROLES[head - _ROLE_BASE], "content": "".join(text)})


def _content_piece(tid: int, where: int) -> tuple[str, bool]:
    """(text, whether <|im_end|> is folded in) of a prompt content id."""
    if _ASCII4 <= tid < _SHORT:
        return _unpack(tid - _ASCII4, 4), False
    if _SHORT <= tid < _SHORT + (1 << 24):
        v = tid - _SHORT
        n = (v >> 21) & 3
        if n:
            return _unpack(v & ((1 << 21) - 1), n), bool(v >> 23)
    if _WIDE <= tid < _WIDE + 0x110000:
        return chr(tid - _WIDE), False
    raise TokenError(f"input_ids[{where}]: {tid} is not a prompt token")


def encode_piece(piece: str) -> int:
    """One output token (separator + word) to its id."""
    match = PIECE.fullmatch(piece)
    if match is None:
        raise TokenError(f"{piece!r} is not one token of the simulated model")
    sep, word = match.group(1) or "", match.group(2)
    if word in _VOCAB_INDEX:
        core = _VOCAB_INDEX[word]
    elif _NUMBER_WORD.fullmatch(word):
        core = _NUMBER + int(word[:-1])
    else:
        raw = word.encode()
        if len(raw) > ECHO_BYTES:
            raise TokenError(f"{word!r} is longer than one token of the simulated model")
        core = _ECHO + (len(raw) << 24) + int.from_bytes(raw, "big")
    return _OUT + (SEPARATORS.index(sep) << 27) + core


def decode_output_id(tid: int, where: int = 0) -> str:
    if not _OUT <= tid < _OUT + (len(SEPARATORS) << 27):
        raise TokenError(f"input_ids[{where}]: {tid} is not an output token of the "
                         "simulated model")
    v = tid - _OUT
    sep, core = SEPARATORS[v >> 27], v & ((1 << 27) - 1)
    if core < len(_VOCAB):
        return sep + _VOCAB[core]
    if _NUMBER < core < 2 * _NUMBER:
        return f"{sep}{core - _NUMBER}."
    n = (core - _ECHO) >> 24
    if core >= _ECHO and 1 <= n <= ECHO_BYTES:
        value = (core - _ECHO) & ((1 << 24) - 1)
        try:
            return sep + value.to_bytes(n, "big").decode()
        except (OverflowError, UnicodeDecodeError):
            pass
    raise TokenError(f"input_ids[{where}]: {tid} is not an output token of the simulated "
                     "model")


def pieces(text: str) -> list[str]:
    """The raw output cut into its tokens (the inverse of joining them)."""
    out = [m.group(0) for m in PIECE.finditer(text)]
    if "".join(out) != text:
        raise TokenError("text is not made of the simulated model's tokens")
    return out


def echo_word(word: str) -> str:
    """A prompt word as the model echoes it in one token: its first characters, up to 3
    bytes of UTF-8 (U+FFFD for a character longer than that)."""
    out = ""
    for ch in word:
        if len((out + ch).encode()) > ECHO_BYTES:
            break
        out += ch
    return out or "\ufffd"


def detokenize(ids: list[int], *, skip_special_tokens: bool = True) -> str:
    """The text of any ids this tokenizer makes; TokenError names the first unknown id."""
    out: list[str] = []
    for i, tid in enumerate(ids):
        if isinstance(tid, bool) or not isinstance(tid, int):
            raise TokenError(f"tokens[{i}]: {tid!r} is not an integer")
        if tid in _SPECIAL_TEXT:
            out.append("" if skip_special_tokens else _SPECIAL_TEXT[tid])
        elif tid == NEWLINE:
            out.append("\n")
        elif _ROLE_BASE <= tid < _ROLE_BASE + len(ROLES):
            out.append(ROLES[tid - _ROLE_BASE] + "\n")
        elif tid in _GEN_TEXT:
            out.append(_GEN_TEXT[tid])
        elif tid >= _OUT:
            out.append(decode_output_id(tid, i))
        else:
            try:
                text, closes = _content_piece(tid, i)
            except TokenError:
                raise TokenError(f"tokens[{i}]: {tid} is not a token of the simulated "
                                 "model") from None
            out.append(text + ("" if skip_special_tokens or not closes else "<|im_end|>"))
    return "".join(out)
