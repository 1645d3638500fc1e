"""The demo's built-in prompt set: a few thousand varied, deterministic chat prompts.

Generated rather than shipped so the package stays small and any size can be asked for;
the same N always gives the same file, byte for byte, so a re-run resumes instead of
importing something new.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

_TASKS = (
    "Explain {topic} to {audience}.",
    "Write a short essay on {topic} for {audience}.",
    "List the three most common misconceptions about {topic}, and correct each one.",
    "Compare two approaches to {topic} and say when you would choose each.",
    "Design a one-week study plan on {topic} for {audience}.",
    "What would change in the world if {topic} had never been discovered? Reason step by step.",
    "Write a Python function related to {topic}, with tests, and explain your design.",
    "Summarise the history of {topic} in five bullet points.",
    "Pose a hard exam question about {topic}, then solve it.",
    "Argue for and against the claim that {topic} is overrated.",
)
_TOPICS = (
    "speculative decoding", "the Mamba state-space model", "binary search", "photosynthesis",
    "the French Revolution", "public-key cryptography", "plate tectonics", "compound interest",
    "the TCP handshake", "CRISPR gene editing", "the Fourier transform", "supply and demand",
    "black holes", "the halting problem", "vaccination", "sorting algorithms",
    "the printing press", "climate feedback loops", "garbage collection", "game theory",
    "Bayesian inference", "the immune system", "relational databases", "music theory",
    "the Roman Empire", "quantum entanglement", "ocean currents", "recursion",
    "inflation", "neural networks", "the water cycle", "consensus protocols",
)
_AUDIENCES = (
    "a ten-year-old", "a first-year student", "a busy executive", "an expert",
    "a skeptical journalist", "a retired engineer", "a new employee",
)


def demo_prompt(i: int) -> dict[str, object]:
    task = _TASKS[i % len(_TASKS)]
    topic = _TOPICS[(i // len(_TASKS)) % len(_TOPICS)]
    audience = _AUDIENCES[(i // (len(_TASKS) * len(_TOPICS))) % len(_AUDIENCES)]
    text = task.format(topic=topic, audience=audience)
    variant = i // (len(_TASKS) * len(_TOPICS) * len(_AUDIENCES))
    if variant:
        text += f" (Variant {variant}: answer in at most {100 + 50 * variant} words.)"
    return {"id": f"demo-{i:06d}", "messages": [{"role": "user", "content": text}]}


def write_demo_prompts(path: Path, count: int) -> bool:
    """Write `count` prompts to `path` unless it already holds exactly them. Returns True
    when it wrote (atomically, so a killed demo never leaves half a file)."""
    data = "".join(json.dumps(demo_prompt(i), ensure_ascii=False) + "\n" for i in range(count))
    encoded = data.encode()
    try:
        if path.read_bytes() == encoded:
            return False
    except FileNotFoundError:
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(encoded)
    os.replace(tmp, path)
    return True
