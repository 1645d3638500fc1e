"""The tiny Qwen3 model the GPU test serves with real SGLang, checked on the CPU with
transformers: it loads from its own files, its chat template renders Qwen3's generation
prompt for enable_thinking on, off and unset, and it says the planted chain under sampling,
so the GPU test's exact expectations (`TinyModel.expected`) hold for what it generates.

Skipped where torch, transformers or tokenizers are not installed (the project's own
environment and CI): see tests/gpu/README.md for an environment that has them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tests.gpu.tiny_qwen3 import (  # noqa: E402
    ANSWER_PIECES,
    REASONING_PIECES,
    THINK_CLOSE,
    THINK_OPEN,
    TinyModel,
    build_tiny_qwen3,
)

PROMPTS = (
    "Explain the Roman Empire to an expert.",
    "hi",
    "Write a Python function related to binary search, with tests, and explain your design. "
    * 8,
    "Ünïcödé and emoji 🙂 survive byte-level BPE; 12345 + 678 = ?",
)
REASONING = "".join(REASONING_PIECES)
ANSWER = "\n\n" + "".join(ANSWER_PIECES)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    return build_tiny_qwen3(tmp_path_factory.mktemp("models") / "tiny-think-model")


@pytest.fixture(scope="module")
def loaded(tiny: TinyModel):
    tok = transformers.AutoTokenizer.from_pretrained(tiny.path)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny.path)
    model.eval()
    return tok, model


def _prompt_ids(tok, text: str, **template_kwargs):
    rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                       add_generation_prompt=True, **template_kwargs)
    return rendered, tok(rendered, return_tensors="pt", add_special_tokens=False).input_ids


def _generate(model, ids, max_new_tokens: int, seed: int = 0):
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=max_new_tokens, do_sample=True, temperature=0.6,
                             top_p=0.95)
    return out[0, ids.shape[1]:].tolist()


def test_config_carries_what_sglang_reads(tiny: TinyModel):
    cfg = json.loads((tiny.path / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["model_type"] == "qwen3"
    assert cfg["dtype"] == "bfloat16"
    assert cfg["head_dim"] == 128          # a head size Hopper's fa3 kernels are built for
    assert cfg["rope_parameters"]["rope_theta"] > 0
    assert cfg["vocab_size"] % 64 == 0 and cfg["vocab_size"] >= tiny.tokenizer_size
    assert cfg["max_position_embeddings"] >= 2048
    gen = json.loads((tiny.path / "generation_config.json").read_text())
    assert tiny.im_end_id in gen["eos_token_id"]
    # The weights are the files' only large part: tiny enough to copy to a GPU machine.
    assert (tiny.path / "model.safetensors").stat().st_size < 16 * 2**20
    # What a test that built the model in a child process reads back.
    assert TinyModel.load(tiny.path) == tiny


def test_chat_template_renders_qwen3s_generation_prompt(loaded):
    tok, _ = loaded
    on, _ = _prompt_ids(tok, "hello", enable_thinking=True)
    unset, _ = _prompt_ids(tok, "hello")
    off, _ = _prompt_ids(tok, "hello", enable_thinking=False)
    assert on == unset == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert off == on + "<think>\n\n</think>\n\n"
    # What SGLang's template detection keys the enable_thinking toggle on is in the template.
    assert "enable_thinking is defined and enable_thinking is false" in tok.chat_template


def test_think_markers_are_kept_by_the_detokenizer_and_stop_tokens_are_not(loaded):
    tok, _ = loaded
    text = "<think>a</think>b<|im_end|>"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "<think>a</think>b"
    assert tok.convert_tokens_to_ids("<|im_end|>") == tok.eos_token_id


@pytest.mark.parametrize("prompt", PROMPTS, ids=["short", "tiny", "long", "unicode"])
def test_thinking_on_says_the_chain_then_stops(loaded, tiny: TinyModel, prompt: str):
    tok, model = loaded
    _, ids = _prompt_ids(tok, prompt, enable_thinking=True)
    out = _generate(model, ids, max_new_tokens=64, seed=len(prompt))
    assert out == list(tiny.chain_ids)
    assert tok.decode(out, skip_special_tokens=True) == \
        f"{THINK_OPEN}{REASONING}{THINK_CLOSE}{ANSWER}"


@pytest.mark.parametrize("prompt", PROMPTS[:2], ids=["short", "tiny"])
def test_thinking_off_answers_without_thinking(loaded, tiny: TinyModel, prompt: str):
    tok, model = loaded
    _, ids = _prompt_ids(tok, prompt, enable_thinking=False)
    out = _generate(model, ids, max_new_tokens=64)
    assert tok.decode(out, skip_special_tokens=True) == "".join(ANSWER_PIECES)
    assert out[-1] == tiny.im_end_id


def test_the_planted_token_wins_by_a_wide_margin_at_every_step(loaded, tiny: TinyModel):
    """Teacher-forced along the chain: at each step the next chain token's logit leads the
    runner-up by far more than bf16 rounding or any sampling temperature could undo."""
    tok, model = loaded
    for prompt in PROMPTS:
        _, ids = _prompt_ids(tok, prompt)
        full = torch.cat([ids, torch.tensor([list(tiny.chain_ids)])], dim=1)
        with torch.no_grad():
            logits = model(full).logits[0].float()
        start = ids.shape[1] - 1
        for step, want in enumerate(tiny.chain_ids):
            row = logits[start + step]
            top2 = row.topk(2)
            assert top2.indices[0].item() == want, (prompt[:20], step)
            assert (top2.values[0] - top2.values[1]).item() > 20.0, (prompt[:20], step)


def test_expected_matches_what_the_model_says_at_every_cut(loaded, tiny: TinyModel):
    """`expected(n)` is the split of the text the model generates under max_tokens n: all
    reasoning while no </think> came, then the answer so far; "stop" only once <|im_end|>
    fits."""
    tok, model = loaded
    _, ids = _prompt_ids(tok, PROMPTS[0])
    for n in range(1, tiny.full_tokens + 3):
        out = _generate(model, ids, max_new_tokens=n)
        raw = tok.decode(out, skip_special_tokens=True)
        exp = tiny.expected(n)
        assert raw.startswith(THINK_OPEN)
        rebuilt = THINK_OPEN + (exp.reasoning_content or "")
        if THINK_CLOSE in raw:
            rebuilt += THINK_CLOSE + exp.content
        else:
            assert exp.content == ""
        assert rebuilt == raw, n
        assert exp.finish_reason == ("stop" if out[-1] == tiny.im_end_id else "length"), n
    assert tiny.expected(tiny.think_tokens) == type(exp)(REASONING, "", "length")
    assert tiny.expected(tiny.full_tokens) == type(exp)(REASONING, ANSWER, "stop")
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        tiny.expected(0)


def test_a_model_directory_named_like_a_builtin_template_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="built-in chat templates"):
        build_tiny_qwen3(tmp_path / "my-qwen3-tiny")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_a_cuda_device_in_bf16_it_says_the_same_chain(tiny: TinyModel):
    """The GPU's bf16 kernels (not the CPU's) keep the planted margins: what SGLang will
    run, short of SGLang's own kernels."""
    tok = transformers.AutoTokenizer.from_pretrained(tiny.path)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny.path,
                                                              dtype=torch.bfloat16).to("cuda")
    for prompt in PROMPTS:
        _, ids = _prompt_ids(tok, prompt, enable_thinking=True)
        assert _generate(model, ids.to("cuda"), max_new_tokens=64) == list(tiny.chain_ids)
