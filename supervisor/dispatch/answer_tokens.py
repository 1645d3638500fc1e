"""What a finished streamed answer keeps of its exact tokens, and a continuation's whole answer.

Every streamed answer comes with its ids (the `sglext` chunk, supervisor/sglang/token_ids.py).
The state DB keeps them for answers that end `length`, the ones a raised limit continues, or
for every answer with job.keep_token_ids = "all". A continuation's answer is the stored part
and the new one stitched (supervisor/sglang/continuation.py), its text decoded by the server
from all the ids; a continuation that came back without its ids, or whose ids the server
could not decode, is a retry, and the retry starts again from the stored ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from state.records import StoredAnswer, TokenIds
from supervisor.dispatch.completion import Answer, Completion, Retryable
from supervisor.dispatch.stream_answer import StreamAnswer
from supervisor.dispatch.worker_client import WIRE_ERRORS, request_timeout
from supervisor.sglang.continuation import stitch
from supervisor.sglang.token_ids import DetokenizeError, detokenize


@dataclass(frozen=True)
class Finished:
    """A completion as recorded, with what it keeps of its tokens."""
    answer: Answer
    tokens: TokenIds | None = None
    continued_from: int | None = None     # output tokens the stored part had
    decoded: int | None = None            # tokens this request decoded (a continuation's part)


def keeps(answer: Completion, keep_all: bool) -> bool:
    return keep_all or answer.finish_reason == "length"


def fresh_tokens(answer: Completion, sa: StreamAnswer, thinking: bool) -> TokenIds | None:
    """A one-go answer's ids, where the stream carried them. Whether it stopped inside the
    thinking is read off the split text: no answer text yet means no `</think>` yet (but
    for one cut right after `</think>`: its continuation's part then streams as reasoning,
    and the stitching, which splits the text of all ids, still gets it right)."""
    if sa.input_ids is None or sa.output_ids is None:
        return None
    return TokenIds(tuple(sa.input_ids), tuple(sa.output_ids), thinking and not answer.content)


async def continued(client: aiohttp.ClientSession, base_url: str, stored: StoredAnswer,
                    part: Completion, sa: StreamAnswer, thinking: bool,
                    timeout_s: float) -> Finished:
    """The whole answer from the stored part and the streamed one."""
    if sa.output_ids is None:
        return Finished(Retryable("the continuation came back without its token ids "
                                  "(x-sglext-return-output-ids)", "no token ids"))
    ids = [*stored.ids.output_ids, *sa.output_ids]
    try:
        text = await detokenize(client, base_url, ids, request_timeout(timeout_s))
    except DetokenizeError as exc:
        return Finished(Retryable(f"continuation: {exc}", "detokenize"))
    except WIRE_ERRORS as exc:
        return Finished(Retryable(f"continuation: /detokenize failed: "
                                  f"{type(exc).__name__}: {exc}", "detokenize"))
    whole, tokens = stitch(stored, part, sa.output_ids, text, thinking)
    return Finished(whole, tokens, continued_from=len(stored.ids.output_ids),
                    decoded=part.completion_tokens)
