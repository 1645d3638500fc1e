"""The control socket's API, declared once: each call's method, versioned path, request
record, result record and the error statuses it can answer. Standard library only.

Everything else is derived from this table: the daemon's routes (control/app.py: one
handler parses the request record, calls the `Actions` method named after the entry,
audits it and serialises the result), the one client (client/control_client.py: `call`)
and its typed shortcuts (client/control_calls.py), which the TUI and the test fake share.

Wire rules, the same for every entry (old clients depend on them):
- A `{field}` in the path is that request field, percent-quoted by the client.
- GET: the other fields go in the query string (numbers as digits, booleans as
  true/false; a field left at None is not sent). POST: they are a JSON object body
  (an empty object when the record has none); unknown fields are ignored.
- The answer is the result record as JSON with status `ok`; a refusal is `ErrorBody`
  (one line) with one of `errors`, or 400/413 for a body that does not parse or is too
  big, 404/405 for an unknown path or method, 500 for a crash.
- Every POST is an action: the daemon writes it to the audit table (`control_action`,
  subject = the entry's name) with the caller's uid/pid, after it succeeded.

To add an action (e.g. `tune-start`):
1. Here: its request and result records in actions.py (frozen dataclasses of `Record`;
   new fields get defaults, so older clients keep working), and one `Endpoint` below,
   added to ENDPOINTS. Its name is the audit subject and the `ctl` subcommand.
2. The daemon: an `async def tune_start(self, req, caller)` on control/actions.Actions
   (the name's dashes as underscores) that returns the result record or raises
   Refused(status, one line) with a status listed in `errors`.
3. Where a person sees it: a `ctl` subcommand of the same name whose arguments are named
   after the request's fields (commands/ctl.py builds the record from them) and/or a TUI
   key, and a line in client/text.result_text. Code calls it as
   `client.call(TUNE_START, TuneStartRequest(...))`, or through a one-line typed shortcut
   added to client/control_calls.ControlCalls.
Tests: tests/control/test_api_table.py wants one example request per entry (it names the
entry that lacks one) and sends it to a real daemon; the TUI's fake
(tests/fixtures/fake_daemon_client.py) needs an `answer_<name>` once a TUI test sends it.
Reads that stream (`/v1/events`, NDJSON) and `/metrics` (Prometheus text) are not records
and stay outside the table.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from supervisor.contract.actions import (
    LogRequest,
    LogTail,
    MaxTokensRequest,
    MaxTokensResult,
    PauseRequest,
    PauseResult,
    RequeueFailedRequest,
    RequeueResult,
    RequeueTruncatedRequest,
    ResetRequest,
    ResetResult,
    RestartRequest,
    RestartResult,
    ResumeRequest,
    ResumeResult,
    RetuneRequest,
    RetuneResult,
    StatusRequest,
)
from supervisor.contract.codec import ContractError, from_plain, to_plain
from supervisor.contract.status import Status
from supervisor.contract.tuning import (
    TuneStartRequest,
    TuneStartResult,
    TuneStopRequest,
    TuneStopResult,
)

Req = TypeVar("Req")
Res = TypeVar("Res")

EVENTS_PATH = "/v1/events"
# What any request with a body may be refused with, whatever the action: a body that is
# not JSON or not the record (400), one over the daemon's size limit (413).
BODY_ERRORS = (400, 413)
_FIELD = re.compile(r"\{(\w+)\}")
_MAX_DIGITS = 18


@dataclass(frozen=True)
class Wire:
    """One request as it travels: the path with its fields filled in, the query string
    and the JSON body (None for a GET)."""
    path: str
    params: dict[str, str]
    body: dict[str, Any] | None


@dataclass(frozen=True)
class Endpoint(Generic[Req, Res]):
    name: str                    # audit subject, `ctl` subcommand; Actions method with _
    method: str                  # GET reads, POST acts (and is audited)
    path: str
    request: type[Req]
    result: type[Res]
    errors: tuple[int, ...]      # the action's own refusals, beside BODY_ERRORS
    ok: int = 200                # 202: accepted, it goes on in the daemon

    def __post_init__(self) -> None:
        if self.method not in ("GET", "POST"):
            raise ValueError(f"{self.name}: method {self.method!r} is not GET or POST")
        if not self.path.startswith("/v1/"):
            raise ValueError(f"{self.name}: path {self.path!r} is not versioned (/v1/...)")
        names = set(getattr(self.request, "__dataclass_fields__", ()))
        missing = [f for f in self.path_fields if f not in names]
        if missing:
            raise ValueError(f"{self.name}: {self.request.__name__} has no field "
                             f"{', '.join(missing)} named in {self.path}")

    @property
    def handler(self) -> str:
        """The daemon's Actions method that answers this entry."""
        return self.name.replace("-", "_")

    @property
    def audited(self) -> bool:
        return self.method == "POST"

    @property
    def path_fields(self) -> tuple[str, ...]:
        return tuple(_FIELD.findall(self.path))

    def to_wire(self, request: Req) -> Wire:
        plain = to_plain(request)
        path = self.path.format(**{k: quote(str(plain.pop(k)), safe="")
                                   for k in self.path_fields})
        if self.method == "GET":
            return Wire(path, {k: _query_text(v) for k, v in plain.items() if v is not None},
                        None)
        return Wire(path, {}, plain)

    def from_wire(self, path_params: Mapping[str, str], query: Mapping[str, str],
                  body: Any) -> Req:
        """The request record from what the daemon received; ContractError names the field."""
        where = self.request.__name__
        hints = typing.get_type_hints(self.request)
        if self.method == "GET":
            data: dict[str, Any] = {k: _query_value(f"{where}.{k}", hints[k], v)
                                    for k, v in query.items() if k in hints}
        elif isinstance(body, dict):
            data = dict(body)
        else:
            raise ContractError(f"{where}: expected an object as the body")
        # The path wins over a body that names the same field.
        data.update({k: _query_value(f"{where}.{k}", hints[k], v)
                     for k, v in path_params.items() if k in self.path_fields})
        return from_plain(self.request, data)

    def result_from(self, data: Any) -> Res:
        return from_plain(self.result, data)


def _query_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _query_value(where: str, hint: Any, text: str) -> Any:
    if hint is bool or hint == bool | None:
        if text in ("true", "false"):
            return text == "true"
        raise ContractError(f"{where}: expected true or false, got {text[:40]!r}")
    if hint is int or hint == int | None:
        if text.isdigit() and len(text) <= _MAX_DIGITS:
            return int(text)
        raise ContractError(f"{where}: expected a non-negative integer, got {text[:40]!r}")
    return text


STATUS = Endpoint("status", "GET", "/v1/status", StatusRequest, Status, ())
LOG = Endpoint("log", "GET", "/v1/servers/{server}/log", LogRequest, LogTail, (400, 404, 503))
MAX_TOKENS = Endpoint("max-tokens", "POST", "/v1/max-tokens", MaxTokensRequest,
                      MaxTokensResult, (400, 409, 422, 503))
REQUEUE_TRUNCATED = Endpoint("requeue-truncated", "POST", "/v1/requeue-truncated",
                             RequeueTruncatedRequest, RequeueResult, (503,))
REQUEUE_FAILED = Endpoint("requeue-failed", "POST", "/v1/requeue-failed",
                          RequeueFailedRequest, RequeueResult, (503,))
PAUSE = Endpoint("pause", "POST", "/v1/pause", PauseRequest, PauseResult, (400, 503))
RESUME = Endpoint("resume", "POST", "/v1/resume", ResumeRequest, ResumeResult, (503,))
RESTART = Endpoint("restart", "POST", "/v1/restart", RestartRequest, RestartResult,
                   (404, 409, 503), ok=202)
RETUNE = Endpoint("retune", "POST", "/v1/retune", RetuneRequest, RetuneResult,
                  (400, 404, 409, 422, 503), ok=202)
RESET = Endpoint("reset", "POST", "/v1/servers/{server}/reset", ResetRequest, ResetResult,
                 (404, 409, 503))
# The tuner (issue 39, contract/tuning.py): 202, the search goes on in the daemon.
TUNE_START = Endpoint("tune-start", "POST", "/v1/tune/start", TuneStartRequest,
                      TuneStartResult, (400, 404, 409, 422, 503), ok=202)
TUNE_STOP = Endpoint("tune-stop", "POST", "/v1/tune/stop", TuneStopRequest, TuneStopResult,
                     (409, 503))

ENDPOINTS: tuple[Endpoint[Any, Any], ...] = (
    STATUS, LOG, MAX_TOKENS, REQUEUE_TRUNCATED, REQUEUE_FAILED, PAUSE, RESUME, RESTART,
    RETUNE, RESET, TUNE_START, TUNE_STOP)
