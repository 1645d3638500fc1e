"""The control socket's HTTP API (Starlette): routes, request parsing, one-line errors.

Every failure a client can cause is a 4xx with `{"error": "...", "status": N}`: malformed
JSON, wrong types (named by field), unknown servers and paths, bodies over MAX_BODY bytes.
An unexpected error is a 500 with one line, logged with its traceback; the daemon goes on.
"""

from __future__ import annotations

import json
import logging
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from supervisor.contract.actions import (ErrorBody, MaxTokensRequest, PauseRequest,
                                         RequeueFailedRequest, RequeueTruncatedRequest,
                                         RestartRequest, RetuneRequest)
from supervisor.contract import status as c
from supervisor.control.actions import Actions, Refused
from supervisor.contract.codec import ContractError, to_plain
from supervisor.control.hub import Hub
from supervisor.control.metrics import CONTENT_TYPE, RestartCauses, render
from supervisor.control.peer import PEER_KEY

log = logging.getLogger("supervisor.control")

MAX_BODY = 64 * 1024
MAX_LOG_LINES = 10_000
T = TypeVar("T")


def _json(record: Any, status: int = 200) -> Response:
    body = json.dumps(to_plain(record), ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)
    return Response(body, status_code=status, media_type="application/json")


def _error(status: int, reason: str) -> Response:
    return _json(ErrorBody(reason, status), status)


async def _body(request: Request, cls: type[T]) -> T:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise Refused(413, f"request body over {MAX_BODY} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                raise Refused(413, f"request body over {MAX_BODY} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise Refused(400, "the client went away mid-body") from None
    raw = b"".join(chunks)
    if not raw.strip():
        raw = b"{}"
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused(400, f"body is not JSON: {exc}") from None
    try:
        return cls.from_plain(data)  # type: ignore[attr-defined,no-any-return]
    except ContractError as exc:
        raise Refused(400, str(exc)) from None


def _caller(request: Request) -> c.Caller | None:
    state = request.scope.get("state") or {}
    caller = state.get(PEER_KEY)
    return caller if isinstance(caller, c.Caller) else None


class _Empty(c.Record):
    @classmethod
    def from_plain(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ContractError("expected a JSON object")
        return None


def build_app(hub: Hub, actions: Actions, causes: RestartCauses) -> ASGIApp:
    Handler = Callable[[Request], Awaitable[Response]]

    def guarded(fn: Handler) -> Handler:
        async def handle(request: Request) -> Response:
            try:
                response = await fn(request)
                if request.method == "POST":
                    hub.invalidate()
                return response
            except Refused as exc:
                log.info("control: %s %s refused (%d): %s", request.method, request.url.path,
                         exc.status, exc.reason)
                return _error(exc.status, exc.reason)
        return handle

    async def events(request: Request) -> Response:
        raw = request.query_params.get("since")
        since: int | None = None
        if raw is not None:
            if not raw.isdigit() or len(raw) > 18:
                raise Refused(400, f"since: expected an event id (a non-negative integer), "
                                   f"got {raw[:40]!r}")
            since = int(raw)
        sub = hub.subscribe()
        upto = hub.last_event_id

        async def lines() -> AsyncIterator[str]:
            try:
                seen = upto
                if since is not None:
                    # Up to the DB's newest, not the hub's: what was recorded a moment ago
                    # may not have been polled yet. Live copies of these are skipped below.
                    replayed = await hub.replay(since, None)
                    if replayed:
                        seen = max(seen, replayed[-1].id)
                        yield "".join(c.stream_line(e) for e in replayed)
                yield c.stream_line(await hub.status())
                while True:
                    batch = await sub.next_batch()
                    if not batch:
                        return                       # the daemon is stopping
                    out = []
                    for event_id, line in batch:
                        if event_id is not None:
                            if event_id <= seen:
                                continue             # already sent by the replay
                            seen = event_id
                        out.append(line)
                    if out:
                        yield "".join(out)
            finally:
                hub.unsubscribe(sub)

        return StreamingResponse(lines(), media_type="application/x-ndjson",
                                 headers={"cache-control": "no-store"})

    async def server_log(request: Request) -> Response:
        raw = request.query_params.get("lines", "200")
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_LOG_LINES:
            raise Refused(400, f"lines: expected 1..{MAX_LOG_LINES}, got {raw[:40]!r}")
        return _json(actions.log_tail(request.path_params["name"], int(raw)))

    async def max_tokens(request: Request) -> Response:
        req = await _body(request, MaxTokensRequest)
        return _json(await actions.max_tokens(req, _caller(request)))

    async def requeue_truncated(request: Request) -> Response:
        req = await _body(request, RequeueTruncatedRequest)
        return _json(await actions.requeue_truncated(req, _caller(request)))

    async def requeue_failed(request: Request) -> Response:
        req = await _body(request, RequeueFailedRequest)
        return _json(await actions.requeue_failed(req, _caller(request)))

    async def pause(request: Request) -> Response:
        req = await _body(request, PauseRequest)
        return _json(await actions.pause(req, _caller(request)))

    async def resume(request: Request) -> Response:
        await _body(request, _Empty)
        return _json(await actions.resume(_caller(request)))

    async def restart(request: Request) -> Response:
        req = await _body(request, RestartRequest)
        return _json(await actions.restart(req, _caller(request)), 202)

    async def retune(request: Request) -> Response:
        req = await _body(request, RetuneRequest)
        return _json(await actions.retune(req, _caller(request)), 202)

    async def reset(request: Request) -> Response:
        await _body(request, _Empty)
        return _json(await actions.reset(request.path_params["name"], _caller(request)))

    async def metrics(request: Request) -> Response:
        s = await hub.status()
        d = actions.job.dispatcher
        totals = (d.lengths.completions_total, d.lengths.tokens_total) if d else (0, 0)
        fleet = actions.job.fleet
        requests = {}
        if d is not None and fleet is not None:
            for name in fleet.servers:
                p = d.progress(name)
                requests[name] = (p.completed, p.errors)
        return Response(render(s, totals, causes, requests), media_type=CONTENT_TYPE)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        reason = {404: f"no such path: {request.url.path[:200]}",
                  405: f"{request.method} is not allowed on {request.url.path[:200]}"}
        return _error(exc.status_code, reason.get(exc.status_code, str(exc.detail)))

    async def crash(request: Request, exc: Exception) -> Response:
        log.exception("control: %s %s failed", request.method, request.url.path)
        return _error(500, f"internal error: {type(exc).__name__}: {str(exc)[:200]}")

    get, post = ["GET"], ["POST"]
    routes = [
        Route("/v1/events", guarded(events), methods=get),
        Route("/v1/servers/{name}/log", guarded(server_log), methods=get),
        Route("/v1/servers/{name}/reset", guarded(reset), methods=post),
        Route("/v1/max-tokens", guarded(max_tokens), methods=post),
        Route("/v1/requeue-truncated", guarded(requeue_truncated), methods=post),
        Route("/v1/requeue-failed", guarded(requeue_failed), methods=post),
        Route("/v1/pause", guarded(pause), methods=post),
        Route("/v1/resume", guarded(resume), methods=post),
        Route("/v1/restart", guarded(restart), methods=post),
        Route("/v1/retune", guarded(retune), methods=post),
        Route("/metrics", guarded(metrics), methods=get),
    ]
    app = Starlette(routes=routes,
                    exception_handlers={HTTPException: http_error, Exception: crash})

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        # GET /v1/status is what every poller sends, ten times a second each; answered
        # straight from the shared serialised snapshot, it costs the job's event loop a
        # fraction of a full pass through the framework. It is the path's only handler (no
        # route behind it); everything else goes to Starlette.
        if scope["type"] == "http" and scope["path"] == "/v1/status":
            method = scope["method"]
            if method not in ("GET", "HEAD"):
                await _error(405, f"{method} is not allowed on /v1/status")(scope, receive, send)
                return
            body = await hub.status_json()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body if method == "GET" else b""})
            return
        await app(scope, receive, send)

    return asgi
