"""A tiny Qwen3-architecture model and tokenizer built on this machine, for running real
SGLang without downloading anything.

Random weights answer with random tokens, about which little can be asserted. So the
weights are random except for one planted path: the token embeddings are large and the
lm_head maps each token of a fixed chain to the next one, which makes the model a bigram
model along that chain (the attention and MLP layers keep their small random init and run
on every step, they just cannot outvote the residual stream). After Qwen3's generation
prompt it always says

    <think>Okay, the user asks something; I will answer briefly</think>\\n\\nHere is my reply: forty two!<|im_end|>

and after the `enable_thinking=False` prompt (which already closes an empty `<think>`
block) it says only the answer. So a test knows, for any max_tokens, the exact
reasoning_content, content and finish_reason SGLang's qwen3 reasoning parser must return.

What SGLang 0.5.23 needs from the files, and where it says so:
- config.json: `architectures: ["Qwen3ForCausalLM"]`, `head_dim`, `rms_norm_eps`,
  `attention_bias`, `rope_parameters.rope_theta` (sglang/srt/models/qwen3.py,
  Qwen3DecoderLayer); `max_position_embeddings` is the context length
  (sglang/srt/utils/hf_transformers/common.py, get_context_length); a bf16 dtype, since
  float32 checkpoints are served as float16 (sglang/srt/configs/model_config.py,
  _get_and_verify_dtype). head_dim 128 is one the Hopper fa3 kernels are built for.
- the chat template's tail is Qwen3's own: `enable_thinking is defined and enable_thinking
  is false` is how SGLang detects an enable_thinking toggle that defaults to on
  (sglang/srt/parser/template_detection.py, enable_thinking_default_true), and then the
  qwen3 parser is forced into reasoning for requests with thinking on
  (sglang/srt/entrypoints/openai/serving_chat.py, _get_reasoning_from_request).
- `<think>`/`</think>` are added tokens that are *not* special, as in Qwen3's tokenizer:
  SGLang detokenizes with skip_special_tokens, and the parser must see the markers
  (sglang/srt/parser/reasoning_parser.py, Qwen3Detector).
- the model directory's name must not match one of SGLang's built-in conversation
  templates, or SGLang would use that instead of ours
  (sglang/srt/parser/conversation.py, get_conv_template_by_model_path).

Needs torch, transformers and tokenizers; `python -m tests.gpu.tiny_qwen3 DIR` builds one
(the GPU test does, in a child process, and reads the chain back with `TinyModel.load`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

# The planted output. Every piece must be one token of the trained vocabulary and no piece
# may repeat: the chain is a function from a token to the next one.
PROMPT_END = "\n"                 # the last token of "<|im_start|>assistant\n"
NO_THINK_END = "\n\n"             # the last token of the enable_thinking=False prompt
REASONING_PIECES = ("Okay", ",", " the", " user", " asks", " something", ";", " I", " will",
                    " answer", " briefly")
ANSWER_PIECES = ("Here", " is", " my", " reply", ":", " forty", " two", "!")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"

# Model shape: a few layers, small hidden size, Qwen3's head_dim.
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 256, 512, 2, 2, 1, 128
MAX_POSITIONS = 4096
VOCAB_TARGET = 1024
# Qwen2/Qwen3 tokenizer.json's pre-tokenizer pattern.
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Logit of the planted next token is about CHAIN_GAIN * sqrt(HIDDEN) = 64; the others stay
# within a few units of 0, so sampling at any usual temperature follows the chain.
CHAIN_GAIN = 4.0
CHAIN_FILE = "tiny_model.json"

# Qwen3's chat template without the tool-calling branches; the generation prompt (the part
# SGLang's detection reads) is verbatim.
CHAT_TEMPLATE = """\
{%- for message in messages %}
    {%- if message.role == "assistant" %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""


@dataclass(frozen=True)
class Expected:
    """What SGLang's chat completion carries for one request."""
    reasoning_content: str | None
    content: str
    finish_reason: str           # "stop" (on <|im_end|>) or "length"


@dataclass(frozen=True)
class TinyModel:
    path: Path
    # Output token ids from <think> through <|im_end|> (thinking on).
    chain_ids: tuple[int, ...]
    im_end_id: int
    tokenizer_size: int

    @property
    def think_tokens(self) -> int:
        """Tokens up to and including </think>."""
        return 2 + len(REASONING_PIECES)

    @property
    def full_tokens(self) -> int:
        """Tokens of a whole thinking-on answer, <|im_end|> included."""
        return len(self.chain_ids)

    def save(self) -> None:
        """Beside the weights, for a test that built the model in another process."""
        (self.path / CHAIN_FILE).write_text(json.dumps(
            {"chain_ids": list(self.chain_ids), "im_end_id": self.im_end_id,
             "tokenizer_size": self.tokenizer_size}))

    @classmethod
    def load(cls, path: Path) -> TinyModel:
        data = json.loads((path / CHAIN_FILE).read_text())
        return cls(path, tuple(data["chain_ids"]), data["im_end_id"], data["tokenizer_size"])

    def expected(self, max_tokens: int) -> Expected:
        """The parsed answer to any prompt with thinking on, cut at `max_tokens`: the qwen3
        parser, forced into reasoning, strips the leading <think>, splits at the first
        </think>, and puts everything in reasoning while no </think> came
        (sglang/srt/parser/reasoning_parser.py, BaseReasoningFormatDetector); an empty
        reasoning is reported as null and an empty content as ""
        (sglang/srt/entrypoints/openai/serving_chat.py)."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        pieces = [THINK_OPEN, *REASONING_PIECES, THINK_CLOSE, NO_THINK_END, *ANSWER_PIECES]
        said = pieces[:max_tokens]
        finish = "stop" if max_tokens >= len(self.chain_ids) else "length"
        text = "".join(said[1:])
        reasoning, sep, content = text.partition(THINK_CLOSE)
        return Expected(reasoning or None, content if sep else "", finish)


def _corpus() -> list[str]:
    """Local training text: the chain's words often enough that BPE makes each one token,
    plus filler so the vocabulary is not only the chain."""
    answer = "".join(ANSWER_PIECES)
    reasoning = "".join(REASONING_PIECES)
    filler = ("Explain the history of science to a student. Write a short essay about "
              "numbers, sorting algorithms, the water cycle and the Roman Empire. "
              "Question 12: what is 7 plus 35? List three facts, then reason step by step.")
    lines = []
    for i in range(400):
        lines.append(f"{reasoning}\n\n{answer} {filler} {i}\n")
    return lines


def build_tokenizer():  # -> transformers.PreTrainedTokenizerFast
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Byte-level with Qwen2/3's split pattern: every string is encodable, decoding is exact,
    # and a run of newlines is one pre-token (so "\n\n" can be one token, as in Qwen3).
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_TARGET, show_progress=False,
                                  special_tokens=[END_OF_TEXT, IM_START, IM_END],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    # As in Qwen3's tokenizer: the think markers are added tokens, not special ones.
    tok.add_tokens([AddedToken(THINK_OPEN, special=False, normalized=False),
                    AddedToken(THINK_CLOSE, special=False, normalized=False)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=IM_END, pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START, IM_END], clean_up_tokenization_spaces=False,
        model_max_length=MAX_POSITIONS, chat_template=CHAT_TEMPLATE)


def _one_token(tokenizer, piece: str) -> int:
    ids = tokenizer.encode(piece, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"chain piece {piece!r} is {len(ids)} tokens {ids}, not one: "
                         "the tokenizer's training text must contain it more often")
    return ids[0]


def _plant_chain(model, transitions: list[tuple[int, int]], seed: int) -> None:
    """Large random token embeddings; lm_head row of each chain token = the direction of
    the token before it. Every other lm_head row stays small random."""
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    emb = torch.randn(model.config.vocab_size, HIDDEN, generator=gen)
    head = torch.randn(model.config.vocab_size, HIDDEN, generator=gen) * 0.02
    for prev, nxt in transitions:
        head[nxt] = CHAIN_GAIN * emb[prev] / emb[prev].norm()
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(emb)
        model.lm_head.weight.copy_(head)


def build_tiny_qwen3(directory: Path, seed: int = 0) -> TinyModel:
    """Write config, weights (safetensors), tokenizer and generation config to
    `directory` (created), the way save_pretrained lays out a Hugging Face checkpoint."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    if any(part in directory.name.lower() for part in ("qwen", "llava", "minicpm", "vicuna")):
        raise ValueError(f"{directory.name}: a model directory named like this picks one of "
                         "SGLang's built-in chat templates instead of ours")
    tokenizer = build_tokenizer()
    ids = {p: _one_token(tokenizer, p)
           for p in (PROMPT_END, NO_THINK_END, THINK_OPEN, THINK_CLOSE, IM_END,
                     *REASONING_PIECES, *ANSWER_PIECES)}
    if len(set(ids.values())) != len(ids):
        raise ValueError("two chain pieces share a token: the chain would not be a function")
    chain = [ids[p] for p in (THINK_OPEN, *REASONING_PIECES, THINK_CLOSE, NO_THINK_END,
                              *ANSWER_PIECES, IM_END)]
    transitions = [(ids[PROMPT_END], chain[0]), *zip(chain, chain[1:])]

    size = len(tokenizer)
    vocab = -(-size // 64) * 64     # padded like Qwen's (and SGLang's lm_head shards)
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    eot = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    config = Qwen3Config(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM, max_position_embeddings=MAX_POSITIONS, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        tie_word_embeddings=False, attention_bias=False, hidden_act="silu",
        bos_token_id=eot, eos_token_id=im_end, pad_token_id=eot, use_cache=True)
    config.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    _plant_chain(model, transitions, seed)
    model = model.to(torch.bfloat16)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    GenerationConfig(bos_token_id=eot, eos_token_id=[im_end, eot], pad_token_id=eot,
                     do_sample=True, temperature=0.6, top_p=0.95).save_pretrained(directory)
    _check_config(directory)
    built = TinyModel(directory, tuple(chain), im_end, size)
    built.save()
    return built


def _check_config(directory: Path) -> None:
    """What SGLang reads from config.json is there under the names it reads."""
    cfg = json.loads((directory / "config.json").read_text())
    for key in ("architectures", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "intermediate_size", "rms_norm_eps",
                "vocab_size", "max_position_embeddings", "tie_word_embeddings",
                "attention_bias", "hidden_act"):
        if key not in cfg:
            raise ValueError(f"{directory}/config.json has no {key}")
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" not in rope and "rope_theta" not in cfg:
        raise ValueError(f"{directory}/config.json has no rope_theta")
    if cfg["architectures"] != ["Qwen3ForCausalLM"]:
        raise ValueError(f"{directory}/config.json: architectures {cfg['architectures']}")
    dtype = cfg.get("dtype") or cfg.get("torch_dtype")
    if dtype != "bfloat16":
        raise ValueError(f"{directory}/config.json: dtype {dtype!r}, expected bfloat16")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.gpu.tiny_qwen3 DIRECTORY")
    built = build_tiny_qwen3(Path(sys.argv[1]))
    print(f"{built.path}: {built.tokenizer_size} tokens, chain {list(built.chain_ids)}")
