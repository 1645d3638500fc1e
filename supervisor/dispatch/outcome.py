"""Turning a classified answer into the outcome the store records for its prompt.

A completion becomes `Done` with how it was produced; SGLang refusing the prompt for its
length (supervisor/sglang/context_refusal.py) fails it for good; anything else is a counted
retry, failed once attempts run out. (While the circuit breaker is open the dispatcher sends
an error's prompt back to pending instead, before it gets here: error_breaker.py.)
"""

from __future__ import annotations

import logging

from state.records import ClaimedPrompt, Done, Failed, Outcome, Retry, TokenIds
from supervisor.dispatch.completion import Answer, Completion, Permanent

log = logging.getLogger("supervisor.dispatch")


def outcome_of(prompt: ClaimedPrompt, answer: Answer, *, server: str, model: str,
               max_tokens: int, max_attempts: int, started: float, finished: float,
               loop: bool = False, tokens: TokenIds | None = None,
               continued_from: int | None = None, continue_now: bool = False) -> Outcome:
    if isinstance(answer, Completion):
        return Done(id=prompt.id, completion=answer, max_tokens=max_tokens, model=model,
                    server=server, started_at=started, finished_at=finished, loop=loop,
                    tokens=tokens, continued_from=continued_from, continue_now=continue_now)
    if isinstance(answer, Permanent):
        log.warning("%s: prompt %s failed: %s", server, prompt.id, answer.error)
        return Failed(prompt.id, answer.error)
    log.info("%s: prompt %s will be retried: %s", server, prompt.id, answer.error)
    return Retry(prompt.id, answer.error, max_attempts)
