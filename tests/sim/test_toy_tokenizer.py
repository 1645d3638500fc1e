"""The simulated model's tokenizer: prompts and outputs go to ids and back unchanged (so ids
can leave a simulator process and mean the same in another), every id fits 4 bytes, and
ids it never makes are refused naming the first one."""

from __future__ import annotations

import pytest

from supervisor.sim.filler_text import filler
from supervisor.sim.looping_text import LoopPlan, list_text, looping_text, prompt_words
from supervisor.sim.reasoning_split import raw_output
from supervisor.sim.toy_tokenizer import (
    IM_END,
    TokenError,
    decode_input,
    detokenize,
    encode_piece,
    encode_prompt,
    pieces,
)
from tests.fixtures.real_prompts import real_prompts

CONVERSATION = [
    {"role": "system", "content": "Réponds en français, brièvement."},
    {"role": "user", "content": "Quelle est la capitale du Japon ? 東京ですか？ 🗼"},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": [{"type": "text", "text": "Et "}, {"type": "text",
                                                                      "text": "de l'Italie ?"}]},
]


def _output_ids(text: str) -> list[int]:
    return [encode_piece(p) for p in pieces(text)]


def test_a_prompt_and_its_answer_come_back_from_their_ids():
    for thinking in (True, False):
        ids = encode_prompt(CONVERSATION, thinking=thinking)
        answer = raw_output(filler(40, 7), filler(9, 99), True)
        back = decode_input(ids + _output_ids(answer)[:30])
        assert back.thinking is thinking and back.prompt_len == len(ids)
        assert back.messages == [{"role": "system", "content": CONVERSATION[0]["content"]},
                                 {"role": "user", "content": CONVERSATION[1]["content"]},
                                 {"role": "assistant", "content": ""},
                                 {"role": "user", "content": "Et de l'Italie ?"}]
        assert "".join(back.output) == "".join(pieces(answer)[:30])
    assert all(0 <= i < 2 ** 31 for i in ids)


def test_the_prompt_count_is_about_four_characters_a_token_plus_the_template():
    def count(messages: list) -> int:
        return len(encode_prompt(messages, thinking=True))
    assert count([{"role": "user", "content": "x" * 376}]) == 100
    assert count([{"role": "user", "content": "x" * 379}]) == 100
    assert count([{"role": "user", "content": "x" * 380}]) == 101


def test_every_answer_text_is_whole_tokens_one_a_word():
    """Thinking answers, lists and loops (numbered, echoing multilingual prompts): the
    pieces join back to the text, decode from their ids, and count as the words do."""
    texts = [raw_output(filler(50, 3), filler(20, 80), True), raw_output(filler(5, 1), "", False),
             list_text(200, 11)]
    for i, row in enumerate(real_prompts()):
        echo = prompt_words(row["messages"])
        for numbered in (False, True):
            loop = LoopPlan(onset=64, period=max(1, min(30, len(echo))), echo_prompt=True,
                            numbered=numbered)
            texts.append(looping_text(400, i, loop, echo))
    for text in texts:
        ids = _output_ids(text)
        assert detokenize(ids) == text
    assert len(_output_ids(list_text(200, 11))) == 200
    assert len(_output_ids(looping_text(400, 5, LoopPlan(64, 7, False, True), []))) == 400


def test_ids_it_never_makes_are_refused_naming_the_first():
    with pytest.raises(TokenError, match=r"input_ids\[0\]: expected <\|im_start\|>"):
        decode_input([5, 6])
    prompt = encode_prompt([{"role": "user", "content": "hi"}], thinking=True)
    with pytest.raises(TokenError, match=rf"input_ids\[{len(prompt)}\]: 77 is not an output"):
        decode_input(prompt + [77])
    with pytest.raises(TokenError, match=r"tokens\[1\]: 3 is not a token"):
        detokenize([IM_END, 3])
    with pytest.raises(TokenError, match="must be one of"):
        encode_prompt([{"role": "robot", "content": "x"}], thinking=True)
    assert detokenize([IM_END]) == "" and detokenize([IM_END], skip_special_tokens=False) \
        == "<|im_end|>"
