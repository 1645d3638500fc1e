"""The status contract: JSON round trips, strict types, tolerant versions."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import typing

import pytest

from supervisor.contract import status as c
from supervisor.contract.actions import (
    ErrorBody,
    FlagChange,
    FlagSetting,
    LogTail,
    MaxTokensRequest,
    MaxTokensResult,
    PauseRequest,
    PauseResult,
    RequeueFailedRequest,
    RequeueResult,
    ResetResult,
    RestartRequest,
    RestartResult,
    ResumeResult,
    RetuneRequest,
    RetuneResult,
)
from supervisor.contract.codec import ContractError
from tests.fixtures import status_samples as samples


def _records() -> list[type]:
    return [v for v in vars(c).values()
            if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == c.__name__]


def test_status_round_trips_exactly() -> None:
    s = samples.status()
    text = s.to_json()
    again = c.Status.from_json(text)
    assert again == s
    assert again.to_json() == text
    # Types survive, not only values: an int flag stays an int, a float stays a float.
    flags = {f.name: f.value for f in again.servers[0].flags}
    assert type(flags["max-running-requests"]) is int
    assert type(flags["mem-fraction-static"]) is float
    assert flags["enable-metrics"] is True
    assert again.servers[1].state is c.ServerState.READY


def test_optional_parts_absent_round_trip() -> None:
    s = samples.status(servers=0, uploads=None, energy=None, recent_events=(), throughput=(),
                       gpus=c.Gpus(available=False, reason="NVML Shared Library Not Found",
                                   sampled_at=None))
    assert c.Status.from_json(s.to_json()) == s


def test_every_record_is_frozen_and_fully_typed() -> None:
    for cls in _records():
        assert cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
        for name, hint in typing.get_type_hints(cls).items():
            text = repr(hint)
            assert "Any" not in text and "dict" not in text, (cls.__name__, name, text)


def test_every_action_record_round_trips() -> None:
    records = [
        MaxTokensRequest(8192, True), MaxTokensResult(4096, 8192, 17),
        RequeueFailedRequest("context length"), RequeueResult("failed", 3),
        PauseRequest("maintenance"),
        PauseResult(True, "maintenance", (c.PauseReason("operator", "maintenance"),)),
        ResumeResult((c.PauseReason("operator", "maintenance"),), ()), RestartRequest("gpu1"),
        RestartResult(("gpu0", "gpu1"), "restart requested"),
        RetuneRequest((FlagSetting("mem-fraction-static", 0.85),
                       FlagSetting("cuda-graph-max-bs", None)), "gpu0", True),
        RetuneResult((FlagChange("mem-fraction-static", 0.88, 0.85),), ("gpu0",)),
        ResetResult("gpu3", c.ServerState.FAILED), ErrorBody("unknown server 'x'", 404),
        LogTail("gpu0", "/var/log/gpu0.log", ("a", "b")), c.Gap(12),
    ]
    for r in records:
        assert type(r).from_json(r.to_json()) == r


def test_stream_lines_round_trip() -> None:
    s = samples.status(servers=2)
    for item in (s, s.recent_events[1], c.Gap(5)):
        line = c.stream_line(item)
        assert line.endswith("\n") and "\n" not in line[:-1]
        assert c.parse_stream_line(line) == item
    with pytest.raises(ContractError, match="known type"):
        c.parse_stream_line('{"type": "bogus", "data": {}}')


def test_wrong_types_name_the_field() -> None:
    data = json.loads(samples.status(servers=2).to_json())
    data["servers"][1]["in_flight"] = "many"
    with pytest.raises(ContractError, match=r"Status\.servers\[1\]\.in_flight: expected int"):
        c.Status.from_plain(data)
    data = json.loads(samples.status(servers=1).to_json())
    data["job"]["done"] = True          # a bool is not a count
    with pytest.raises(ContractError, match=r"job\.done"):
        c.Status.from_plain(data)
    data = json.loads(samples.status(servers=1).to_json())
    data["servers"][0]["state"] = "sleepy"     # not a state's shape (a newer one's is read)
    with pytest.raises(ContractError, match="sleepy.*not one of"):
        c.Status.from_plain(data)
    data = json.loads(samples.status(servers=1).to_json())
    del data["job"]["total"]
    with pytest.raises(ContractError, match=r"job\.total: missing"):
        c.Status.from_plain(data)
    with pytest.raises(ContractError, match="not JSON"):
        c.Status.from_json("{nope")
    data = json.loads(samples.status(servers=1).to_json())
    data["output_lengths"]["edges"] = [0, 1]
    with pytest.raises(ContractError, match="edges"):
        c.Status.from_plain(data)


def test_versions_meet_unknown_fields_ignored_missing_defaults_taken() -> None:
    data = json.loads(samples.status(servers=1).to_json())
    data["some_future_figure"] = {"x": 1}
    data["servers"][0]["future_flag"] = 3
    for key in ("energy", "throughput", "recent_events"):
        del data[key]
    del data["eta"]["low_s"]
    s = c.Status.from_plain(data)
    assert s.energy is None and s.throughput == () and s.eta.low_s is None


def test_a_server_state_a_newer_daemon_added_is_read_as_its_text() -> None:
    """GONE came after the first clients: an older client then failed on the whole
    snapshot. A state this client does not know is kept as its text, equal to none it
    knows, written back as it came; one that is not a state's shape is still refused."""
    from supervisor.client.text import report
    data = json.loads(samples.status(servers=2).to_json())
    data["servers"][0]["state"] = "WARMING_UP"
    s = c.Status.from_plain(data)
    state = s.servers[0].state
    assert state == "WARMING_UP" and state not in list(c.ServerState)
    assert state is not c.ServerState.READY and s.servers[1].state is c.ServerState.READY
    assert json.loads(s.to_json())["servers"][0]["state"] == "WARMING_UP"
    assert "WARMING_UP" in report(s, "test")
    data["servers"][0]["state"] = "ready; DROP TABLE"
    with pytest.raises(ContractError, match="state"):
        c.Status.from_plain(data)


def test_another_schema_version_is_refused_with_advice() -> None:
    data = json.loads(samples.status(servers=1).to_json())
    data["schema_version"] = c.SCHEMA_VERSION + 1
    with pytest.raises(ContractError, match="upgrade the older side"):
        c.Status.from_plain(data)


def test_nan_is_never_written() -> None:
    bad = samples.status(servers=0, rates=dataclasses.replace(samples.status().rates,
                                                              req_per_s=float("nan")))
    with pytest.raises(ValueError):
        bad.to_json()


def test_daemon_and_contract_share_one_server_state_enum() -> None:
    from supervisor.servers.server_state import ServerState
    assert ServerState is c.ServerState


FORBIDDEN = ("state", "sqlite_utils", "sqlite3", "boto3", "botocore", "pynvml",
             "supervisor.dispatch", "supervisor.servers", "supervisor.job", "supervisor.gpu",
             "supervisor.uploads", "textual_never_needed_by_client")


def test_tui_and_client_import_nothing_of_the_daemon() -> None:
    code = (
        "import sys\n"
        "import tui.app, supervisor.client.control_client, supervisor.contract.status\n"
        f"bad = [m for m in sys.modules if any(m == f or m.startswith(f + '.') "
        f"for f in {FORBIDDEN!r})]\n"
        "print(','.join(sorted(bad)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "", out.stdout


def test_contract_is_a_standard_library_only_leaf() -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import supervisor.contract.status, supervisor.contract.actions\n"
        "new = set(sys.modules) - before\n"
        "third = sorted(m for m in new if m.split('.')[0] not in sys.stdlib_module_names "
        "and m not in ('supervisor', 'supervisor.contract') "
        "and not m.startswith('supervisor.contract.'))\n"
        "print(','.join(third))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "", out.stdout


def test_list_flag_values_round_trip() -> None:
    r = RetuneRequest((FlagSetting("cuda-graph-bs", (1, 2, 4, 8)),
                       FlagSetting("json-model-override-args", "{}")))
    again = RetuneRequest.from_json(r.to_json())
    assert again == r and type(again.flags[0].value) is tuple
