"""The control socket's HTTP API (Starlette): routes, request parsing, one-line errors.

The routes are contract/api.py's table: each entry goes to one generic handler that reads
its request record (path, query or body), calls the Actions method named after it, audits
it when it is a POST and answers its result record. Only the event stream, /metrics and
the fast GET /v1/status are written out here.

Every failure a client can cause is a 4xx with `{"error": "...", "status": N}`: malformed
JSON, wrong types (named by field), unknown servers and paths, bodies over MAX_BODY bytes.
An unexpected error is a 500 with one line, logged with its traceback; the daemon goes on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from supervisor.contract import status as c
from supervisor.contract.actions import ErrorBody
from supervisor.contract.api import BODY_ERRORS, ENDPOINTS, EVENTS_PATH, STATUS, Endpoint
from supervisor.contract.codec import ContractError, to_plain
from supervisor.control.actions import Actions, Refused
from supervisor.control.hub import Hub
from supervisor.control.metrics import CONTENT_TYPE, RestartCauses, render
from supervisor.control.peer import PEER_KEY

log = logging.getLogger("supervisor.control")

MAX_BODY = 64 * 1024


def _json(record: Any, status: int = 200) -> Response:
    body = json.dumps(to_plain(record), ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)
    return Response(body, status_code=status, media_type="application/json")


def _error(status: int, reason: str) -> Response:
    return _json(ErrorBody(reason, status), status)


async def _body(request: Request) -> Any:
    """The request's JSON body, read up to MAX_BODY bytes; an empty body is `{}`."""
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
        return {}
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused(400, f"body is not JSON: {exc}") from None


async def _request(request: Request, endpoint: Endpoint[Any, Any]) -> Any:
    body = await _body(request) if endpoint.method == "POST" else None
    try:
        return endpoint.from_wire(request.path_params, request.query_params, body)
    except ContractError as exc:
        raise Refused(400, str(exc)) from None


def _caller(request: Request) -> c.Caller | None:
    state = request.scope.get("state") or {}
    caller = state.get(PEER_KEY)
    return caller if isinstance(caller, c.Caller) else None


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

    def answer(endpoint: Endpoint[Any, Any]) -> Handler:
        act = getattr(actions, endpoint.handler, None)
        if act is None:
            raise TypeError(f"control: the API's entry {endpoint.name!r} has no Actions method "
                            f"{endpoint.handler}()")
        declared = set(endpoint.errors) | set(BODY_ERRORS)

        async def handle(request: Request) -> Response:
            req = await _request(request, endpoint)
            caller = _caller(request)
            try:
                result = await act(req, caller)
            except Refused as exc:
                if exc.status not in declared:
                    log.warning("control: %s answered %d, which its table entry does not list",
                                endpoint.name, exc.status)
                raise
            if endpoint.audited:
                await actions.audit(endpoint.name, caller, req, result)
            return _json(result, endpoint.ok)
        return handle

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

    # GET /v1/status is answered before Starlette (below); every other entry of the table
    # is a route to the one generic handler.
    routes = [Route(e.path, guarded(answer(e)), methods=[e.method])
              for e in ENDPOINTS if e is not STATUS]
    routes += [Route(EVENTS_PATH, guarded(events), methods=["GET"]),
               Route("/metrics", guarded(metrics), methods=["GET"])]
    app = Starlette(routes=routes,
                    exception_handlers={HTTPException: http_error, Exception: crash})

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        # GET /v1/status is what every poller sends, ten times a second each; answered
        # straight from the shared serialised snapshot, it costs the job's event loop a
        # fraction of a full pass through the framework. It is the path's only handler (no
        # route behind it); everything else goes to Starlette.
        if scope["type"] == "http" and scope["path"] == STATUS.path:
            method = scope["method"]
            if method not in ("GET", "HEAD"):
                await _error(405, f"{method} is not allowed on {STATUS.path}")(scope, receive,
                                                                               send)
                return
            body = await hub.status_json()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body if method == "GET" else b""})
            return
        await app(scope, receive, send)

    return asgi
