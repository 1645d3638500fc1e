"""The control socket's client: httpx over the Unix socket, answers as contract records.

One client, `AsyncControlClient`: `call(endpoint, request)` sends any entry of
contract/api.py's table, the typed shortcuts (`set_max_tokens`...) come from
control_calls.ControlCalls, `events()` reads the stream. `ControlClient`, for
`dflash-supervisor status`/`ctl` and scripts, runs the same calls blocking, on an event
loop of its own in a helper thread. Imports only httpx, anyio and the contract: never the
daemon, the state DB, NVML or boto3.

Errors: `ControlUnreachable` when no daemon answers on the socket (no file, refused, no
permission, timed out); `ControlRefused` when the daemon answered 4xx/5xx, with its one-line
reason; `ControlProtocolError` when the answer does not fit the contract (version skew).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal

from supervisor.client.control_calls import ControlCalls, shortcuts
from supervisor.contract.api import EVENTS_PATH, Endpoint
from supervisor.contract.codec import ContractError
from supervisor.contract.status import StreamItem, parse_stream_line

Req = TypeVar("Req")
Res = TypeVar("Res")

# Where the daemon listens by default: systemd's RuntimeDirectory=dflash-supervisor.
DEFAULT_SOCKET = "/run/dflash-supervisor/control.sock"
SOCKET_ENV = "DFLASH_SOCKET"
# Any host name works over a Unix socket; this one shows up in the daemon's access log.
_BASE_URL = "http://dflash-supervisor"


def default_socket_path() -> str:
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


def _reachable(path: str) -> tuple[str, int | None]:
    """sun_path holds 107 bytes; a longer path (deep test or job directories) is reached
    through an O_PATH descriptor of its directory, kept open for the client's life."""
    if len(os.fsencode(path)) <= 107:
        return path, None
    head, _, name = path.rpartition("/")
    try:
        fd = os.open(head or "/", os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return path, None       # connecting will say what is wrong with the path
    return f"/proc/self/fd/{fd}/{name}", fd


class ControlError(Exception):
    """Base of the client's errors; str() is one line for the operator."""


class ControlUnreachable(ControlError):
    def __init__(self, socket: str, reason: str) -> None:
        super().__init__(f"no daemon answers on {socket}: {reason}")
        self.socket = socket
        self.reason = reason


class ControlRefused(ControlError):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"refused ({status}): {reason}")
        self.status = status
        self.reason = reason


class ControlProtocolError(ControlError):
    pass


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            return body["error"]
    except ValueError:
        pass
    return response.text.strip().splitlines()[0][:300] if response.text.strip() else \
        response.reason_phrase


def _unreachable(socket: str, exc: Exception) -> ControlUnreachable:
    # httpx wraps httpcore's error, which wraps the OSError that says what really happened.
    cause: BaseException | None = exc
    for _ in range(5):
        if cause is None:
            break
        if isinstance(cause, OSError) and cause.strerror:
            return ControlUnreachable(socket, cause.strerror)
        cause = cause.__cause__ or cause.__context__
    return ControlUnreachable(socket, str(exc) or type(exc).__name__)


class AsyncControlClient(ControlCalls):
    """The client, for asyncio/anyio code (dflash-tui's workers)."""

    def __init__(self, socket: str | None = None, *, timeout_s: float = 10.0) -> None:
        self.socket = socket or default_socket_path()
        uds, self._dir_fd = _reachable(self.socket)
        # anyio's Unix connect closes its socket when connect() fails, so a client retrying
        # against a stopped daemon leaks no descriptors (httpcore's blocking one did).
        self._http = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=uds),
                                       base_url=_BASE_URL, timeout=timeout_s, trust_env=False)

    async def __aenter__(self) -> AsyncControlClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    async def call(self, endpoint: Endpoint[Req, Res], request: Req) -> Res:
        wire = endpoint.to_wire(request)
        try:
            response = await self._http.request(endpoint.method, wire.path,
                                                params=wire.params or None, json=wire.body)
        except httpx.TransportError as exc:
            raise _unreachable(self.socket, exc) from None
        if response.status_code >= 400:
            raise ControlRefused(response.status_code, _reason(response))
        try:
            return endpoint.result_from(response.json())
        except (ValueError, ContractError) as exc:
            raise ControlProtocolError(f"{wire.path}: the daemon's answer does not fit the "
                                       f"contract: {exc}") from None

    async def events(self, since: int | None = None, *,
                     idle_timeout_s: float = 60.0) -> AsyncGenerator[StreamItem, None]:
        """Ends with ControlUnreachable when the daemon goes away or sends nothing for
        `idle_timeout_s` (it sends a snapshot every control.interval_s)."""
        params = {} if since is None else {"since": str(since)}
        try:
            async with self._http.stream("GET", EVENTS_PATH, params=params,
                                         timeout=httpx.Timeout(10.0, read=idle_timeout_s)) as r:
                if r.status_code >= 400:
                    await r.aread()
                    raise ControlRefused(r.status_code, _reason(r))
                async for line in r.aiter_lines():
                    if line:
                        yield _stream_item(line)
        except httpx.TransportError as exc:
            raise _unreachable(self.socket, exc) from None


_SHORTCUTS = shortcuts()
_END = object()


class ControlClient:
    """The same calls, blocking, for the CLI and scripts: each runs on the async client in a
    helper thread's event loop, so there is one client to get right. Its typed shortcuts
    are ControlCalls' (`client.set_max_tokens(8192)`), answered here without `await`. Use
    as a context manager or call close()."""

    def __init__(self, socket: str | None = None, *, timeout_s: float = 10.0) -> None:
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = start_blocking_portal(
            name="dflash-control-client")
        self._portal = self._portal_cm.__enter__()
        self._async = AsyncControlClient(socket, timeout_s=timeout_s)
        self.socket = self._async.socket

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        cm, self._portal_cm = self._portal_cm, None
        if cm is None:
            return
        portal = self._portal
        try:
            portal.call(self._async.aclose)
        finally:
            # A call cut short by Ctrl-C may still run in the helper loop: cancel it.
            with contextlib.suppress(RuntimeError):
                portal.call(portal.stop, True)
            cm.__exit__(None, None, None)

    def call(self, endpoint: Endpoint[Req, Res], request: Req) -> Res:
        return self._portal.call(self._async.call, endpoint, request)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in _SHORTCUTS:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        shortcut = getattr(self._async, name)

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._portal.call(lambda: shortcut(*args, **kwargs))
        blocking.__name__ = name
        return blocking

    def events(self, since: int | None = None, *,
               idle_timeout_s: float = 60.0) -> Iterator[StreamItem]:
        """Status snapshots and events as they come; see AsyncControlClient.events."""
        stream = self._async.events(since, idle_timeout_s=idle_timeout_s)

        async def step() -> Any:
            try:
                return await stream.__anext__()
            except StopAsyncIteration:
                return _END

        try:
            while (item := self._portal.call(step)) is not _END:
                yield item
        finally:
            # The stream's connection belongs to the helper loop: close it there.
            # (Still running after a Ctrl-C: close() cancels it with the loop.)
            if self._portal_cm is not None:
                with contextlib.suppress(RuntimeError):
                    self._portal.call(stream.aclose)


def _stream_item(line: str) -> StreamItem:
    try:
        return parse_stream_line(line)
    except ContractError as exc:
        raise ControlProtocolError(str(exc)) from None


__all__ = ["ControlClient", "AsyncControlClient", "ControlError", "ControlUnreachable",
           "ControlRefused", "ControlProtocolError", "DEFAULT_SOCKET", "default_socket_path"]
