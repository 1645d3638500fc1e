"""Which stall aborts go back to pending for free (request_path.py `_queued_not_failed`):
waits in SGLang's queue do, a request's own failure does not, and a prompt requeued for
waiting too often in a row pays an attempt, so one the server never admits cannot loop."""

from __future__ import annotations

from types import SimpleNamespace

from supervisor.dispatch.request_path import FREE_WAITS, RequestPath
from supervisor.dispatch.stream_answer import StreamAnswer
from supervisor.dispatch.stream_request import Streamed


def streamed(*, tokens: int, server_silent: bool = False, stalled: bool = True) -> Streamed:
    sa = StreamAnswer(running_tokens=tokens)
    return Streamed(answer=None, stream=sa, stalled=stalled, server_silent=server_silent)


def judge(path: SimpleNamespace, s: Streamed | None, queueing: bool, prompt: str = "p") -> bool:
    return RequestPath._queued_not_failed(path, prompt, s, queueing)  # type: ignore[arg-type]


def fresh() -> SimpleNamespace:
    return SimpleNamespace(free_waits={})


def test_never_admitted_while_others_decode_is_a_wait_even_with_a_stale_queue_gauge() -> None:
    assert judge(fresh(), streamed(tokens=0), queueing=False)


def test_stuck_halfway_on_a_server_that_does_not_queue_is_an_attempt() -> None:
    assert not judge(fresh(), streamed(tokens=12), queueing=False)


def test_retracted_halfway_on_a_server_that_says_it_queues_is_a_wait() -> None:
    assert judge(fresh(), streamed(tokens=12), queueing=True)


def test_a_whole_silent_server_is_not_a_queue_unless_sglang_says_so() -> None:
    assert not judge(fresh(), streamed(tokens=0, server_silent=True), queueing=False)
    assert judge(fresh(), streamed(tokens=0, server_silent=True), queueing=True)


def test_an_answer_or_a_plain_error_clears_the_count() -> None:
    path = fresh()
    assert judge(path, streamed(tokens=0), queueing=True)
    assert path.free_waits == {"p": 1}
    assert not judge(path, None, queueing=True)              # unstreamed, or it finished
    assert path.free_waits == {}
    assert judge(path, streamed(tokens=0), queueing=True)
    assert not judge(path, streamed(tokens=0, stalled=False), queueing=True)
    assert path.free_waits == {}


def test_the_wait_after_free_waits_in_a_row_counts_as_an_attempt() -> None:
    path = fresh()
    results = [judge(path, streamed(tokens=0), queueing=True) for _ in range(FREE_WAITS + 1)]
    assert results == [True] * FREE_WAITS + [False]
    assert path.free_waits == {}                             # and the count starts again
    assert judge(path, streamed(tokens=0), queueing=True)
    # Counted per prompt.
    assert judge(path, streamed(tokens=0), queueing=True, prompt="q")
    assert path.free_waits == {"p": 1, "q": 1}
