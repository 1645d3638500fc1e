"""A small real dispatcher for the fleet tests: claims prompts from the state store, POSTs
them to the (simulated) server over loopback HTTP, records the outcome. Follows the
contract the lead's dispatcher implements: fill `max_running` slots; on `draining` stop
claiming and return once in-flight requests finish; on cancellation requeue what is in flight
(no attempt counted) before the cancellation propagates."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import anyio
import httpx

from supervisor.servers.endpoint import Endpoint


@dataclass
class Progress:
    in_flight: int = 0
    completed: int = 0
    last_completion_at: float | None = None
    last_request_started_at: float | None = None


@dataclass
class FakeDispatcher:
    # store_call(method_name, *args) -> result: the test's way into the state store.
    store_call: Callable[..., Awaitable[Any]]
    client: httpx.AsyncClient
    max_attempts: int = 5
    request_timeout_s: float = 60.0
    progress_by_name: dict[str, Progress] = field(default_factory=dict)
    served: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    done_ids: list[str] = field(default_factory=list)   # every Done we sent, duplicates kept
    errors: list[str] = field(default_factory=list)

    def progress(self, name: str) -> Progress:
        return self.progress_by_name.setdefault(name, Progress())

    async def serve(self, endpoint: Endpoint, draining: anyio.Event) -> None:
        self.served.append(endpoint.name)
        async with anyio.create_task_group() as tg:
            for _ in range(endpoint.max_running):
                tg.start_soon(self._slot, endpoint, draining)

    async def _slot(self, endpoint: Endpoint, draining: anyio.Event) -> None:
        from state.records import Completion, Done, Requeue, Retry

        p = self.progress(endpoint.name)
        while not draining.is_set():
            # Shielded: a claim that completed in the store's thread must not be dropped by a
            # cancellation arriving on the way back, or that prompt would stay in_flight.
            with anyio.CancelScope(shield=True):
                claimed = await self.store_call("claim", 1, endpoint.name, time.time())
            if not claimed:
                with anyio.move_on_after(0.05):
                    await draining.wait()
                continue
            prompt = claimed[0]
            p.in_flight += 1
            p.last_request_started_at = time.monotonic()
            started = time.time()
            try:
                resp = await self.client.post(
                    endpoint.base_url + "/v1/chat/completions",
                    json={"model": "m", "messages": prompt.messages, "max_tokens": 64},
                    timeout=self.request_timeout_s)
                resp.raise_for_status()
                body = resp.json()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    self.requeued.append(prompt.id)
                    await self.store_call("record", [Requeue(prompt.id)])
                raise
            except httpx.TransportError as exc:
                # The server went away under the request: not the prompt's fault.
                self.errors.append(f"{prompt.id}: {exc!r}")
                with anyio.CancelScope(shield=True):
                    self.requeued.append(prompt.id)
                    await self.store_call("record", [Requeue(prompt.id)])
                await anyio.sleep(0.05)
                continue
            except (httpx.HTTPError, ValueError) as exc:
                self.errors.append(f"{prompt.id}: {exc!r}")
                with anyio.CancelScope(shield=True):
                    await self.store_call("record", [Retry(prompt.id, repr(exc), self.max_attempts)])
                continue
            finally:
                p.in_flight -= 1
            choice = body["choices"][0]
            usage = body.get("usage") or {}
            done = Done(
                id=prompt.id, completion=Completion(
                    content=choice["message"].get("content") or "",
                    reasoning_content=choice["message"].get("reasoning_content"),
                    finish_reason=choice.get("finish_reason") or "stop",
                    prompt_tokens=usage.get("prompt_tokens", 0),
                    completion_tokens=usage.get("completion_tokens", 0),
                    reasoning_tokens=usage.get("reasoning_tokens", 0)),
                max_tokens=64, model="m", server=endpoint.name,
                started_at=started, finished_at=time.time())
            with anyio.CancelScope(shield=True):
                await self.store_call("record", [done])
                self.done_ids.append(prompt.id)
            p.completed += 1
            p.last_completion_at = time.monotonic()
