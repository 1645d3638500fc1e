"""When the main loop ends on its own: finished; or, when asked to stop then, paused with
nothing in flight, or every server FAILED."""

from __future__ import annotations

from supervisor.job.end_policy import end_reason
from supervisor.servers.server_state import ServerState
from tests.fixtures.job_status import job_status as _status
from tests.fixtures.job_status import server_snapshot as _server


def test_finished_ends_whether_or_not_asked_to_stop_when_paused(tmp_path):
    for exit_when_paused in (False, True):
        assert end_reason(_status(tmp_path), exit_when_paused) == "finished"


def test_a_pause_ends_the_job_only_when_asked_and_only_once_nothing_is_in_flight(tmp_path):
    paused = {"quality": "bad rate 0.9 over 200", "disk": "2 GB free"}
    assert end_reason(_status(tmp_path, pending=5, paused=paused), False) is None
    assert end_reason(_status(tmp_path, pending=5, paused=paused, dispatch_in_flight=2),
                      True) is None
    assert end_reason(_status(tmp_path, pending=5, paused=paused), True) == \
        "paused: bad rate 0.9 over 200; 2 GB free"


def test_every_server_failed_ends_the_job_naming_each_cause(tmp_path):
    failed = (_server("gpu0", ServerState.FAILED, "oom: 3 failures"),
              _server("gpu1", ServerState.FAILED, "crash: exit 1"))
    assert end_reason(_status(tmp_path, pending=5, servers=failed), False) is None
    assert end_reason(_status(tmp_path, pending=5, servers=failed), True) == \
        "every server FAILED: gpu0: oom: 3 failures; gpu1: crash: exit 1"
    one_left = (failed[0], _server("gpu1", ServerState.BACKOFF))
    assert end_reason(_status(tmp_path, pending=5, servers=one_left), True) is None
    assert end_reason(_status(tmp_path, pending=5, servers=()), True) is None
