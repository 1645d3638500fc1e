"""Small builders shared by the state tests."""

from __future__ import annotations

from state.records import Completion, Done, ImportRow


def rows(n: int, prefix: str = "p") -> list[ImportRow]:
    return [ImportRow(f"{prefix}{i:04d}", [{"role": "user", "content": f"question {i}"}], i + 1)
            for i in range(n)]


def done(pid: str, t: float, *, finish: str = "stop", max_tokens: int = 100,
         content: str | None = None, loop: bool = False) -> Done:
    return Done(id=pid, completion=Completion(
                    content=content if content is not None else f"answer to {pid}",
                    reasoning_content=f"thinking about {pid}", finish_reason=finish,
                    prompt_tokens=10, completion_tokens=20, reasoning_tokens=5),
                max_tokens=max_tokens, model="m", server="gpu0", started_at=t - 1.0,
                finished_at=t, loop=loop)


def key_for(seq: int) -> str:
    return f"shard-{seq:06d}.jsonl"
