"""The control socket's client: httpx over the Unix socket, answers as contract records.

Shared by `dflash-supervisor status`/`ctl` (the blocking `ControlClient`) and dflash-tui
(`AsyncControlClient`, for its workers). Imports only httpx and the contract: never the
daemon, the state DB, NVML or boto3.

Errors: `ControlUnreachable` when no daemon answers on the socket (no file, refused, no
permission, timed out); `ControlRefused` when the daemon answered 4xx/5xx, with its one-line
reason; `ControlProtocolError` when the answer does not fit the contract (version skew).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator, TypeVar

import httpcore
import httpx

from supervisor.contract.codec import ContractError, to_plain
from supervisor.contract.status import FlagValue, Status, StreamItem, parse_stream_line
from supervisor.contract.actions import (FlagSetting, LogTail, MaxTokensRequest, MaxTokensResult,
                                         PauseRequest, PauseResult, RequeueFailedRequest,
                                         RequeueResult, RequeueTruncatedRequest, ResetResult,
                                         RestartRequest, RestartResult, ResumeResult,
                                         RetuneRequest, RetuneResult)

T = TypeVar("T")

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


@dataclass(frozen=True)
class _Call:
    method: str
    path: str
    result: type
    body: Any = None
    params: dict[str, str] | None = None


def _flags(flags: dict[str, FlagValue | None]) -> tuple[FlagSetting, ...]:
    return tuple(FlagSetting(k, v) for k, v in flags.items())


class _Calls:
    """Each operation as data, so the blocking and the async client cannot drift apart."""

    @staticmethod
    def status() -> _Call:
        return _Call("GET", "/v1/status", Status)

    @staticmethod
    def log(server: str, lines: int) -> _Call:
        return _Call("GET", f"/v1/servers/{_seg(server)}/log", LogTail,
                     params={"lines": str(lines)})

    @staticmethod
    def max_tokens(value: int, requeue_truncated: bool,
                   continue_truncated: bool = False) -> _Call:
        return _Call("POST", "/v1/max-tokens", MaxTokensResult,
                     MaxTokensRequest(value, requeue_truncated, continue_truncated))

    @staticmethod
    def requeue_truncated(include_loops: bool = False) -> _Call:
        return _Call("POST", "/v1/requeue-truncated", RequeueResult,
                     RequeueTruncatedRequest(include_loops))

    @staticmethod
    def requeue_failed(reason_like: str | None) -> _Call:
        return _Call("POST", "/v1/requeue-failed", RequeueResult,
                     RequeueFailedRequest(reason_like))

    @staticmethod
    def pause(reason: str) -> _Call:
        return _Call("POST", "/v1/pause", PauseResult, PauseRequest(reason))

    @staticmethod
    def resume() -> _Call:
        return _Call("POST", "/v1/resume", ResumeResult, {})

    @staticmethod
    def restart(server: str | None) -> _Call:
        return _Call("POST", "/v1/restart", RestartResult, RestartRequest(server))

    @staticmethod
    def retune(flags: dict[str, FlagValue | None], server: str | None, add: bool) -> _Call:
        return _Call("POST", "/v1/retune", RetuneResult,
                     RetuneRequest(_flags(flags), server, add))

    @staticmethod
    def reset(server: str) -> _Call:
        return _Call("POST", f"/v1/servers/{_seg(server)}/reset", ResetResult, {})


def _seg(name: str) -> str:
    from urllib.parse import quote
    return quote(name, safe="")


def _result(call: _Call, response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise ControlRefused(response.status_code, _reason(response))
    try:
        data = response.json()
        if call.result is Status:
            return Status.from_plain(data)
        return call.result.from_plain(data)
    except (ValueError, ContractError) as exc:
        raise ControlProtocolError(f"{call.path}: the daemon's answer does not fit the "
                                   f"contract: {exc}") from None


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


try:
    from httpcore._backends.sync import SyncStream as _SyncStream
except ImportError:  # pragma: no cover - a future httpcore
    _SyncStream = None  # type: ignore[assignment,misc]


class _ClosingUnixBackend(httpcore.SyncBackend):
    """httpcore's blocking Unix-socket connect leaves the socket open when connect() fails
    (httpcore 1.0.x): a client retrying against a stopped daemon would leak one descriptor
    per try until the garbage collector ran. Close it ourselves."""

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            for option in socket_options or ():
                sock.setsockopt(*option)
            sock.settimeout(timeout)
            sock.connect(path)
        except TimeoutError as exc:
            sock.close()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            sock.close()
            raise httpcore.ConnectError(str(exc)) from exc
        return _SyncStream(sock)


def _uds_transport(path: str) -> httpx.HTTPTransport:
    transport = httpx.HTTPTransport(uds=path)
    pool = getattr(transport, "_pool", None)
    # Both are httpcore internals: where they moved, keep httpx's own (leaky but working) path.
    if _SyncStream is not None and hasattr(pool, "_network_backend"):
        pool._network_backend = _ClosingUnixBackend()  # type: ignore[union-attr]
    return transport


class ControlClient:
    """Blocking client, for the CLI. Use as a context manager or call close()."""

    def __init__(self, socket: str | None = None, *, timeout_s: float = 10.0) -> None:
        self.socket = socket or default_socket_path()
        uds, self._dir_fd = _reachable(self.socket)
        self._http = httpx.Client(transport=_uds_transport(uds),
                                  base_url=_BASE_URL, timeout=timeout_s, trust_env=False)

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def _do(self, call: _Call) -> Any:
        try:
            response = self._http.request(call.method, call.path, params=call.params,
                                          json=None if call.body is None else to_plain(call.body))
        except httpx.TransportError as exc:
            raise _unreachable(self.socket, exc) from None
        return _result(call, response)

    def status(self) -> Status:
        return self._do(_Calls.status())

    def log(self, server: str, lines: int = 200) -> LogTail:
        return self._do(_Calls.log(server, lines))

    def set_max_tokens(self, value: int, *, requeue_truncated: bool = False,
                       continue_truncated: bool = False) -> MaxTokensResult:
        return self._do(_Calls.max_tokens(value, requeue_truncated, continue_truncated))

    def requeue_truncated(self, *, include_loops: bool = False) -> RequeueResult:
        return self._do(_Calls.requeue_truncated(include_loops))

    def requeue_failed(self, reason_like: str | None = None) -> RequeueResult:
        return self._do(_Calls.requeue_failed(reason_like))

    def pause(self, reason: str) -> PauseResult:
        return self._do(_Calls.pause(reason))

    def resume(self) -> ResumeResult:
        return self._do(_Calls.resume())

    def restart(self, server: str | None = None) -> RestartResult:
        return self._do(_Calls.restart(server))

    def retune(self, flags: dict[str, FlagValue | None], *, server: str | None = None,
               add: bool = False) -> RetuneResult:
        return self._do(_Calls.retune(flags, server, add))

    def reset(self, server: str) -> ResetResult:
        return self._do(_Calls.reset(server))

    def events(self, since: int | None = None, *,
               idle_timeout_s: float = 60.0) -> Iterator[StreamItem]:
        """Status snapshots and events as they come (a Gap where this reader fell behind).
        Ends with ControlUnreachable when the daemon goes away or sends nothing for
        `idle_timeout_s` (it sends a snapshot every control.interval_s)."""
        params = {} if since is None else {"since": str(since)}
        try:
            with self._http.stream("GET", "/v1/events", params=params,
                                   timeout=httpx.Timeout(10.0, read=idle_timeout_s)) as r:
                if r.status_code >= 400:
                    r.read()
                    raise ControlRefused(r.status_code, _reason(r))
                for line in r.iter_lines():
                    if line:
                        yield _stream_item(line)
        except httpx.TransportError as exc:
            raise _unreachable(self.socket, exc) from None


class AsyncControlClient:
    """The same operations for asyncio/anyio code (dflash-tui's workers)."""

    def __init__(self, socket: str | None = None, *, timeout_s: float = 10.0) -> None:
        self.socket = socket or default_socket_path()
        uds, self._dir_fd = _reachable(self.socket)
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

    async def _do(self, call: _Call) -> Any:
        try:
            response = await self._http.request(
                call.method, call.path, params=call.params,
                json=None if call.body is None else to_plain(call.body))
        except httpx.TransportError as exc:
            raise _unreachable(self.socket, exc) from None
        return _result(call, response)

    async def status(self) -> Status:
        return await self._do(_Calls.status())

    async def log(self, server: str, lines: int = 200) -> LogTail:
        return await self._do(_Calls.log(server, lines))

    async def set_max_tokens(self, value: int, *, requeue_truncated: bool = False,
                             continue_truncated: bool = False) -> MaxTokensResult:
        return await self._do(_Calls.max_tokens(value, requeue_truncated, continue_truncated))

    async def requeue_truncated(self, *, include_loops: bool = False) -> RequeueResult:
        return await self._do(_Calls.requeue_truncated(include_loops))

    async def requeue_failed(self, reason_like: str | None = None) -> RequeueResult:
        return await self._do(_Calls.requeue_failed(reason_like))

    async def pause(self, reason: str) -> PauseResult:
        return await self._do(_Calls.pause(reason))

    async def resume(self) -> ResumeResult:
        return await self._do(_Calls.resume())

    async def restart(self, server: str | None = None) -> RestartResult:
        return await self._do(_Calls.restart(server))

    async def retune(self, flags: dict[str, FlagValue | None], *, server: str | None = None,
                     add: bool = False) -> RetuneResult:
        return await self._do(_Calls.retune(flags, server, add))

    async def reset(self, server: str) -> ResetResult:
        return await self._do(_Calls.reset(server))

    async def events(self, since: int | None = None, *,
                     idle_timeout_s: float = 60.0) -> AsyncIterator[StreamItem]:
        params = {} if since is None else {"since": str(since)}
        try:
            async with self._http.stream("GET", "/v1/events", params=params,
                                         timeout=httpx.Timeout(10.0, read=idle_timeout_s)) as r:
                if r.status_code >= 400:
                    await r.aread()
                    raise ControlRefused(r.status_code, _reason(r))
                async for line in r.aiter_lines():
                    if line:
                        yield _stream_item(line)
        except httpx.TransportError as exc:
            raise _unreachable(self.socket, exc) from None


def _stream_item(line: str) -> StreamItem:
    try:
        return parse_stream_line(line)
    except ContractError as exc:
        raise ControlProtocolError(str(exc)) from None


__all__ = ["ControlClient", "AsyncControlClient", "ControlError", "ControlUnreachable",
           "ControlRefused", "ControlProtocolError", "DEFAULT_SOCKET", "default_socket_path"]
