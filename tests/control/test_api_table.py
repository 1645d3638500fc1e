"""The control API's table (contract/api.py) holds for every entry: the client's wire is what
the daemon reads, the daemon routes it to an Actions method of its name and audits every
POST under that name, the blocking client and the TUI's fake answer it, and what the table
does not know (a path, a method, a body) still gets the one-line 4xx."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest

from supervisor.client.control_calls import ControlCalls, shortcuts
from supervisor.client.control_client import ControlClient, ControlRefused
from supervisor.commands import ctl
from supervisor.contract import actions as a
from supervisor.contract.api import ENDPOINTS, STATUS, Endpoint, Wire
from supervisor.contract.codec import ContractError, to_plain
from supervisor.contract.tuning import TuneStartRequest, TuneStopRequest
from supervisor.control.actions import Actions
from tests.control.test_socket_api import request as raw_request
from tests.fixtures import control_daemon as daemon
from tests.fixtures import tui_status_data as data
from tests.fixtures.fake_daemon_client import FakeDaemon

BY_NAME = {e.name: e for e in ENDPOINTS}

# One request per entry, sent in this order to one daemon: None, answered; a status, the
# refusal that is the answer there (no server is FAILED; gpu9 does not exist). Only one
# roll (the retune) so that no second one is refused as busy. A new entry needs its line.
EXAMPLES: dict[str, tuple[Any, int | None]] = {
    "status": (a.StatusRequest(), None),
    "log": (a.LogRequest("gpu0", 5), None),
    "max-tokens": (a.MaxTokensRequest(256), None),
    "requeue-truncated": (a.RequeueTruncatedRequest(), None),
    "requeue-failed": (a.RequeueFailedRequest("no failure says this"), None),
    "pause": (a.PauseRequest("the api table test"), None),
    "resume": (a.ResumeRequest(), None),
    "retune": (a.RetuneRequest((a.FlagSetting("max-running-requests", 8),), "gpu1"), None),
    "restart": (a.RestartRequest("gpu9"), 404),
    "reset": (a.ResetRequest("gpu1"), 409),
    "tune-start": (TuneStartRequest(server="gpu9"), 404),
    "tune-stop": (TuneStopRequest(), 409),
}


def test_every_entry_has_an_example() -> None:
    assert sorted(EXAMPLES) == sorted(BY_NAME)
    assert len(BY_NAME) == len(ENDPOINTS), "two entries share a name"
    assert len({(e.method, e.path) for e in ENDPOINTS}) == len(ENDPOINTS)


# GET /v1/status is answered from the hub's shared snapshot, before any route (app.py).
@pytest.mark.parametrize("name", sorted(e.name for e in ENDPOINTS if e is not STATUS))
def test_every_entry_has_an_actions_method_taking_its_request(name: str) -> None:
    method = getattr(Actions, BY_NAME[name].handler)
    assert inspect.iscoroutinefunction(method)
    assert list(inspect.signature(method).parameters) == ["self", "req", "caller"]


def _received(endpoint: Endpoint[Any, Any], wire: Wire) -> Any:
    """What the daemon makes of a wire: the path matched as Starlette does, the body
    through JSON."""
    pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(endpoint.path))
    match = re.fullmatch(pattern, wire.path)
    assert match, (endpoint.path, wire.path)
    body = None if wire.body is None else json.loads(json.dumps(wire.body))
    return endpoint.from_wire({k: unquote(v) for k, v in match.groupdict().items()},
                              wire.params, body)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_clients_wire_is_what_the_daemon_reads(name: str) -> None:
    endpoint, (req, _) = BY_NAME[name], EXAMPLES[name]
    assert _received(endpoint, endpoint.to_wire(req)) == req


def test_the_wire_is_what_older_clients_send() -> None:
    """The table changed no byte: the paths, query strings and bodies of before."""
    assert BY_NAME["log"].to_wire(a.LogRequest("gpu 0/1", 50)) == Wire(
        "/v1/servers/gpu%200%2F1/log", {"lines": "50"}, None)
    assert BY_NAME["status"].to_wire(a.StatusRequest()) == Wire("/v1/status", {}, None)
    assert BY_NAME["reset"].to_wire(a.ResetRequest("gpu5")) == Wire(
        "/v1/servers/gpu5/reset", {}, {})
    assert BY_NAME["resume"].to_wire(a.ResumeRequest()) == Wire("/v1/resume", {}, {})
    # (Plus issue 38's two fields, defaults included: a daemon from before them ignores
    # fields it does not know, as the codec's versioning rule has it.)
    assert BY_NAME["max-tokens"].to_wire(a.MaxTokensRequest(8192, True)) == Wire(
        "/v1/max-tokens", {}, {"value": 8192, "requeue_truncated": True,
                               "continue_truncated": False, "include_loops": False,
                               "requeue_at_most": None})
    # An older client's body, without the bound the TUI now sends, is still taken.
    assert BY_NAME["max-tokens"].from_wire({}, {}, {"value": 8192, "requeue_truncated": True}) \
        == a.MaxTokensRequest(8192, True)
    # An old client's empty body and a query value that is not a number.
    assert BY_NAME["resume"].from_wire({}, {}, {}) == a.ResumeRequest()
    with pytest.raises(ContractError, match="LogRequest.lines: expected a non-negative"):
        BY_NAME["log"].from_wire({"server": "gpu0"}, {"lines": "-3"}, None)


def test_a_table_entry_must_name_fields_its_request_has() -> None:
    with pytest.raises(ValueError, match="has no field name"):
        Endpoint("x", "POST", "/v1/servers/{name}/x", a.ResetRequest, a.ResetResult, ())
    with pytest.raises(ValueError, match="not versioned"):
        Endpoint("x", "POST", "/x", a.ResumeRequest, a.ResumeResult, ())


async def test_the_tui_fake_answers_through_the_same_call() -> None:
    """Each entry the fake has an answer for gets its result record; one it has none for
    (an action the TUI does not use yet) fails the test that reaches it, by name."""
    fake = FakeDaemon(data.healthy())
    for name, (req, _) in EXAMPLES.items():
        endpoint = BY_NAME[name]
        if hasattr(fake, f"answer_{endpoint.handler}"):
            assert isinstance(await fake.call(endpoint, req), endpoint.result)
        else:
            with pytest.raises(AssertionError, match=f"no answer for {name!r}"):
                await fake.call(endpoint, req)
    assert fake.calls == [(name, req) for name, (req, _) in EXAMPLES.items()]


def test_the_blocking_client_has_every_typed_call() -> None:
    assert shortcuts() >= {"status", "log", "set_max_tokens", "retune", "reset"}
    assert not shortcuts() & {"call", "events", "aclose"}
    with ControlClient("/nonexistent/control.sock") as client:
        for name in shortcuts():
            assert callable(getattr(client, name)), name
            assert inspect.iscoroutinefunction(getattr(ControlCalls, name))
        with pytest.raises(AttributeError, match="no attribute 'set_max_token'"):
            client.set_max_token  # noqa: B018


# -- against a real daemon --------------------------------------------------------------------

@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[daemon.Daemon]:
    running = daemon.start(tmp_path_factory.mktemp("table") / "job")
    yield running
    assert running.stop() == 0, running.log()[-3000:]


def _audit(d: daemon.Daemon, name: str) -> list[dict]:
    return [json.loads(detail) for (detail,) in d.query(
        "SELECT detail FROM events WHERE kind = 'control_action' AND subject = ?", name)]


@pytest.mark.slow
def test_every_entry_is_routed_answered_and_audited(d: daemon.Daemon) -> None:
    with d.client() as client:
        for name, (req, refusal) in EXAMPLES.items():
            endpoint = BY_NAME[name]
            if refusal is None:
                assert isinstance(client.call(endpoint, req), endpoint.result), name
            else:
                with pytest.raises(ControlRefused) as info:
                    client.call(endpoint, req)
                assert info.value.status == refusal, (name, info.value)
                assert refusal in endpoint.errors, name
    for name, (req, refusal) in EXAMPLES.items():
        rows = _audit(d, name)
        if BY_NAME[name].audited and refusal is None:
            assert [r["request"] for r in rows] == [to_plain(req)], name
        else:
            assert rows == [], name
    # Every refusal came with a status its entry declares.
    assert "which its table entry does not list" not in d.log()


def _path(endpoint: Endpoint[Any, Any]) -> str:
    return endpoint.path.replace("{server}", "gpu0")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(e.name for e in ENDPOINTS if e.method == "POST"))
@pytest.mark.parametrize("body,reason", [
    (b"{nope", "not JSON"),
    (b"[1, 2]", "expected an object"),
    (b'"a string"', "expected an object"),
])
def test_a_body_an_entry_cannot_read_gets_a_one_line_400(d: daemon.Daemon, name: str,
                                                          body: bytes, reason: str) -> None:
    code, answer = raw_request(d, "POST", _path(BY_NAME[name]), body)
    assert code == 400 and reason in answer["error"] and "\n" not in answer["error"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_the_method_an_entry_does_not_take_gets_a_405(d: daemon.Daemon, name: str) -> None:
    endpoint = BY_NAME[name]
    other = "PUT" if endpoint.method == "GET" else "GET"
    code, answer = raw_request(d, other, _path(endpoint))
    assert code == 405 and f"{other} is not allowed" in answer["error"], answer


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/v1/nope", "/v1/servers/gpu0/nope", "/v1/max-tokens/x",
                                  "/v1", "/"])
def test_a_path_the_table_does_not_know_gets_a_404(d: daemon.Daemon, path: str) -> None:
    for method in ("GET", "POST"):
        code, answer = raw_request(d, method, path, b"{}")
        assert code == 404 and "no such path" in answer["error"], (method, path, answer)
        assert "\n" not in answer["error"]


CTL = [
    (["max-tokens", "8192", "--requeue-truncated"], a.MaxTokensRequest(8192, True)),
    (["requeue-truncated", "--include-loops"], a.RequeueTruncatedRequest(include_loops=True)),
    (["requeue-failed", "--reason-like", "context"], a.RequeueFailedRequest("context")),
    (["pause", "checking", "shard", "42"], a.PauseRequest("checking shard 42")),
    (["resume"], a.ResumeRequest()),
    (["restart"], a.RestartRequest(None)),
    (["retune", "--server", "gpu1", "--", "a=1", "--b=x", "a=null"],
     a.RetuneRequest((a.FlagSetting("a", None), a.FlagSetting("b", "x")), "gpu1")),
    (["reset", "gpu5"], a.ResetRequest("gpu5")),
    (["log", "gpu0", "-n", "7"], a.LogRequest("gpu0", 7)),
    (["tune-start", "--server", "gpu1", "--force"], TuneStartRequest(server="gpu1", force=True)),
    (["tune-stop"], TuneStopRequest()),
]


def test_ctl_has_a_subcommand_for_every_entry_but_status() -> None:
    assert sorted(argv[0] for argv, _ in CTL) == sorted(set(BY_NAME) - {"status"})


@pytest.mark.parametrize("argv,expected", CTL, ids=[argv[0] for argv, _ in CTL])
def test_ctl_builds_the_entrys_request_from_its_arguments(argv: list[str],
                                                           expected: Any) -> None:
    args = ctl.build_parser().parse_args(argv)
    assert ctl.request_of(BY_NAME[args.action], args) == expected
