"""The streaming loop watcher: loops confirmed while they are written, in the thinking or in
the answer, and text that only repeats in shape (lists, tables, code, headings) left alone;
the same verdict however the stream is cut, and a bounded memory."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx
import pytest

from supervisor.dispatch.stream_loop_watch import (
    CHECK_CHARS,
    MAX_HELD_DIGITS,
    NUMBER,
    TAIL_CHARS,
    LoopVerdict,
    NumberFolder,
    StreamLoopWatch,
)
from supervisor.sim.filler_text import filler
from supervisor.sim.looping_text import LoopPlan, list_text, loop_plan, looping_text, prompt_words
from supervisor.sim.output_plan import natural_length, prompt_digest
from tests.fixtures.real_prompts import CHAT_QUESTIONS

REPO = Path(__file__).resolve().parents[2]


def stream(text: str, step: int, part: str = "content") -> LoopVerdict | None:
    watch = StreamLoopWatch()
    for i in range(0, len(text), step):
        piece = text[i:i + step]
        verdict = watch.feed(piece, None) if part == "reasoning" else watch.feed(None, piece)
        if verdict is not None:
            return verdict
    return None


def test_a_loop_in_the_thinking_alone_is_confirmed_early():
    thought = filler(1500, 3) + " " + "so the answer is 4, let me check again. " * 2000
    watch = StreamLoopWatch()
    verdict = None
    for i in range(0, len(thought), 40):
        verdict = watch.feed(thought[i:i + 40], None)
        if verdict is not None:
            break
    assert verdict is not None and verdict.part == "reasoning"
    assert "let me check again" in verdict.snippet * 2       # a rotation of the passage
    assert verdict.period_chars == len("so the answer is 0, let me check again. ")
    # Confirmed within a few kilobytes of the loop's start, not at the end of the budget.
    loop_start = len(filler(1500, 3)) + 1
    assert loop_start < verdict.chars <= loop_start + 3 * CHECK_CHARS
    assert watch.feed("more", None) is verdict            # the verdict sticks


def test_a_loop_in_the_answer_alone_is_confirmed_and_the_thinking_stays_clean():
    watch = StreamLoopWatch()
    thought = filler(6000, 17)
    for i in range(0, len(thought), 64):
        assert watch.feed(thought[i:i + 64], None) is None
    answer = filler(200, 5) + " " + " ".join(
        f"Step {i}: we compute the value again and it is {3 * i}." for i in range(1, 400))
    verdict = None
    for i in range(0, len(answer), 64):
        verdict = watch.feed(None, answer[i:i + 64])
        if verdict is not None:
            break
    assert verdict is not None and verdict.part == "content"
    assert "we compute the value again" in verdict.snippet * 2
    assert verdict.chars < len(answer) // 4


def test_the_simulators_loops_are_confirmed_whatever_their_period():
    for period in (4, 40, 400, 1200):
        for numbered in (False, True):
            text = looping_text(32768, 99, LoopPlan(500, period, False, numbered), [])
            verdict = stream(text, 97, "reasoning")
            assert verdict is not None, (period, numbered)
            # The passage is `period` words; its length in characters is about 5 a word.
            assert period * 3 <= verdict.period_chars <= period * 8 + 8


def test_a_loop_without_spaces_is_confirmed():
    rng = random.Random(5)
    alphabet = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
    prose = "".join(rng.choice(alphabet) for _ in range(20000))
    assert stream(prose, 7) is None
    again = "我们再检查一遍这个数值是否正确。"
    verdict = stream(prose[:800] + again * 300, 7)
    assert verdict is not None and verdict.snippet.strip(again) == ""


def _real_prompt_texts() -> list[str]:
    texts = []
    for line in CHAT_QUESTIONS.read_text(encoding="utf-8").splitlines():
        texts.extend(json.loads(line)["turns"])
    return texts


def _structured_texts() -> dict[str, str]:
    prompts = _real_prompt_texts()
    rng = random.Random(3)
    table = "| # | value | share | note |\n|---|---|---|---|\n" + "\n".join(
        f"| {i} | {rng.randint(0, 10 ** 6)} | {rng.random():.3f} | ok |" for i in range(1, 800))
    configs = "\n".join(
        f'    Config({{"BLOCK_M": {rng.choice([16, 32, 64, 128])}, "BLOCK_N": '
        f'{rng.choice([32, 64, 128])}}}, num_stages={rng.randint(1, 5)}, '
        f"num_warps={rng.choice([2, 4, 8])})," for _ in range(600))
    headings = "\n\n".join(f"## Question {i}\n\n{p}\n\n### Answer\n\n{filler(90, 97 * i)}"
                           for i, p in enumerate(prompts, 1))
    steps = " ".join(f"Step {i}: {filler(10, 31 * i)}." for i in range(1, 1500))
    enumerated = "\n".join(f"{i}. {p}" for i, p in enumerate(prompts, 1))
    unrolled = "\n".join(f"    kv_{i} = tl.load(ptr + {i} * stride, mask=mask_{i}, other=0.0)"
                         for i in range(600))
    return {"table": table, "configs": configs, "headings": headings, "steps": steps,
            "enumerated": enumerated, "unrolled": unrolled,
            "list": list_text(30000, 7), "filler": filler(30000, 11)}


def test_lists_tables_code_and_headings_are_not_loops():
    sources = sorted((REPO / "supervisor").rglob("*.py"))[:80]
    docs = [REPO / "README.md", REPO / "supervisor" / "sim" / "README.md"]
    texts = {str(p): p.read_text(encoding="utf-8") for p in sources + docs if p.exists()}
    texts.update(_structured_texts())
    for name, text in texts.items():
        for part in ("reasoning", "content"):
            assert stream(text, 211, part) is None, name


def test_the_verdict_does_not_depend_on_the_chunk_size():
    loop = filler(900, 4) + " " + " ".join(
        f"{k}. {filler(37, 808)}" for k in range(1, 300))
    texts = [loop, filler(20000, 6), _structured_texts()["table"],
             "x" * 10 + "12345" * 40 + " we go around again 7 " * 700]
    rng = random.Random(11)
    for text in texts:
        one = stream(text, 1)
        big = stream(text, 500)
        assert one == big
        watch = StreamLoopWatch()
        pos, mixed = 0, None
        while pos < len(text) and mixed is None:
            step = rng.choice([1, 2, 3, 5, 17, 64, 333, 1500])
            mixed = watch.feed(None, text[pos:pos + step])
            pos += step
        assert mixed == one
    assert stream(texts[0], 1) is not None and stream(texts[3], 1) is not None


def test_numbers_fold_the_same_whatever_the_pieces():
    rng = random.Random(2)
    for _ in range(200):
        text = "".join(rng.choice(["a", "_", " ", "7", "42", "x1", ".", "\n", "0099"])
                       for _ in range(rng.randint(1, 60)))
        folder, out, pos = NumberFolder(), [], 0
        while pos < len(text):
            step = rng.randint(1, 6)
            out.append(folder.fold(text[pos:pos + step]))
            pos += step
        out.append(folder.fold(" "))                    # flushes a held trailing number
        assert "".join(out) == NUMBER.sub("0", text + " "), text


def test_the_memory_kept_is_bounded():
    watch = StreamLoopWatch()
    text = filler(32000, 1)
    bound = 2 * (2 * TAIL_CHARS + CHECK_CHARS + MAX_HELD_DIGITS + 1)
    for _rep in range(6):
        for i in range(0, len(text), 300):
            assert watch.feed(text[i:i + 300], text[i:i + 300]) is None
        assert watch.kept_chars() <= bound
    assert watch.tokens == 6 * 2 * len(text) // 4


def test_the_callers_token_count_dates_the_verdict():
    text = filler(300, 2) + " " + "round and round we go once more. " * 400
    watch = StreamLoopWatch()
    verdict, sent = None, 0
    for i in range(0, len(text), 30):
        sent += 6
        verdict = watch.feed(text[i:i + 30], None, generated_tokens=sent)
        if verdict is not None:
            break
    assert verdict is not None and verdict.tokens == sent == watch.tokens


def test_bad_input_is_refused_with_a_clear_error():
    watch = StreamLoopWatch()
    with pytest.raises(ValueError, match="generated_tokens"):
        watch.feed("a", None, generated_tokens=-1)
    with pytest.raises(TypeError, match="content delta must be a string"):
        watch.feed(None, 3)  # type: ignore[arg-type]


def _stream_sim(base_url: str, messages: list[dict], thinking: bool,
                max_tokens: int) -> tuple[LoopVerdict | None, int]:
    """A real simulated server's stream through a watcher; on a verdict the stream is
    closed, as an abort would end it. Returns (verdict, words read)."""
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "stream": True,
            "separate_reasoning": True, "chat_template_kwargs": {"enable_thinking": thinking}}
    watch, words = StreamLoopWatch(), 0
    with httpx.Client(base_url=base_url, trust_env=False, timeout=60) as client:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                choices = json.loads(line[6:])["choices"]
                delta = choices[0]["delta"] if choices else {}
                reasoning, content = delta.get("reasoning_content"), delta.get("content")
                words += len((reasoning or "").split()) + len((content or "").split())
                verdict = watch.feed(reasoning, content, generated_tokens=words)
                if verdict is not None:
                    return verdict, words
    return None, words


def test_the_simulators_streamed_loops_are_confirmed_and_its_other_answers_are_not(sim_server):
    sim = sim_server("--sim-instant", "--sim-loop-share", "1", "--reasoning-parser", "qwen3",
                     "--context-length", "40960")
    rows = [[{"role": "user", "content": turn}] for turn in _real_prompt_texts()]
    looping, plain = [], []
    for messages in rows:
        digest = prompt_digest(messages, 0)
        plan = loop_plan(digest, natural_length(digest), 1.0, len(prompt_words(messages)))
        (looping if plan is not None else plain).append((messages, plan))
    assert len(looping) >= 4 and len(plain) >= 2
    for k, (messages, plan) in enumerate(looping[:4]):
        thinking = k % 2 == 0
        verdict, words = _stream_sim(sim.base_url, messages, thinking, 32768)
        assert verdict is not None and verdict.part == ("reasoning" if thinking else "content")
        # Confirmed after the loop began and long before the 32,768-token budget ran out.
        assert plan.onset < verdict.tokens == words < 32768 // 3
    for messages, _ in plain[:2]:
        assert _stream_sim(sim.base_url, messages, True, 32768)[0] is None


def test_two_copies_of_a_long_passage_are_a_loop_unless_their_numbers_differ():
    rng = random.Random(8)
    passage = filler(300, 444) + " "
    # Two copies, and the third begun: confirmed at the next check, a kilobyte on at most.
    verdict = stream(filler(500, 1) + " " + passage * 2 + passage[:1100] + filler(400, 2), 50)
    assert verdict is not None and verdict.period_chars == len(passage)

    def block() -> str:
        return "\n".join(f"    Config(block_m={rng.choice([16, 32, 64])}, warps="
                         f"{rng.choice([2, 4, 8])}, stages={rng.randint(1, 5)}, name='tile'),"
                         for _ in range(30)) + "\n"
    # The same shape twice, other values: two parameter tables, not a loop.
    assert stream(filler(500, 1) + "\n" + block() + block() + filler(400, 2), 50) is None


def test_a_loop_that_varies_a_little_is_confirmed_and_near_twin_code_blocks_are_not():
    rng = random.Random(4)
    passage = filler(120, 555).split()
    words = filler(700, 9).split()
    while len(words) < 6000:
        # One word in twenty-five changed in each copy: no two copies alike.
        words += [rng.choice(passage) if rng.random() < 0.04 else w for w in passage]
    verdict = stream(" ".join(words), 64, "reasoning")
    assert verdict is not None and not verdict.exact and verdict.part == "reasoning"
    assert verdict.chars < len(" ".join(words)) // 3

    def method(name: str) -> str:
        return (f"    def {name}(self, batch, weights, config):\n"
                f"        hidden = self.{name}_proj(batch)\n" + filler(450, 77) + "\n"
                f"        return self.{name}_out(hidden, config)\n\n")
    # Two blocks alike but for their names, as code often has: not a loop.
    twins = filler(600, 3) + "\n" + method("encode") + method("decode") + filler(600, 4)
    assert stream(twins, 64) is None
