"""`servers.attach`: attached servers load with or without servers of the daemon's own (count
0, `gpus = []`), are named ext0, ext1...; a malformed entry is one line naming the entry and
what is wrong, and `check` lists what it will attach."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.commands import check
from supervisor.config import ConfigError, parse_config
from supervisor.config.attach_urls import attach_targets

HEAD = '[generation]\nenable_thinking = false\n'


def _check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    path = tmp_path / "job.toml"
    path.write_text(text)
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')   # `check` wants it there
    rc = check.main(["--config", str(path), "--skip-flag-check"])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("servers", [
    'count = 0\nattach = ["http://node7:30000", "https://10.0.0.8:31000/"]',
    'gpus = []\nattach = ["http://node7:30000", "https://10.0.0.8:31000/"]',
    'attach = ["http://node7:30000", "https://10.0.0.8:31000"]',
])
def test_a_config_with_only_attached_servers_loads(tmp_path: Path, capsys, servers: str):
    # No model_path: the daemon launches nothing, so it loads no model.
    rc, out, err = _check(tmp_path, f'{HEAD}[servers]\n{servers}\n', capsys)
    assert rc == 0, err
    assert "ext0: attached http://node7:30000 (not launched, restarted or stopped" in out
    assert "ext1: attached https://10.0.0.8:31000 " in out
    assert "gpu" not in out.replace("GPU", "")


def test_attached_beside_own_servers_are_named_after_them():
    cfg = parse_config({"servers": {"count": 2, "model_path": "m",
                                    "attach": ["http://[::1]:40000", "http://node9:30000"]},
                        "generation": {"enable_thinking": False}})
    assert [(t.name, t.url, t.host, t.port) for t in attach_targets(cfg.servers.attach)] == [
        ("ext0", "http://[::1]:40000", "::1", 40000), ("ext1", "http://node9:30000", "node9", 30000)]


@pytest.mark.parametrize("attach, error", [
    ('["node7:30000"]', "servers.attach[0]: 'node7:30000' needs http:// or https:// in front"),
    ('["http://node7:30000", "ftp://node8:30000"]', "servers.attach[1]: 'ftp://node8:30000' needs"),
    ('["http://node7"]', "servers.attach[0]: 'http://node7' has no port"),
    ('["http://node7:0"]', "servers.attach[0]: 'http://node7:0': the port is not a TCP port"),
    ('["http://node7:99999"]', "servers.attach[0]: 'http://node7:99999': the port is not a TCP"),
    ('["http://node7:3x"]', "servers.attach[0]: 'http://node7:3x': the port is not a TCP port"),
    ('["http://node 7:30000"]', "servers.attach[0]: 'http://node 7:30000': 'node 7' is not an IP"),
    ('["http://node7:30000/v1"]', "servers.attach[0]: 'http://node7:30000/v1': only scheme, host"),
    ('["http://:30000"]', "servers.attach[0]: 'http://:30000': no host"),
    ('["http://a:1", "http://A:1"]', "servers.attach[1]: 'http://A:1' is the same server as "
     "servers.attach[0]"),
    ('[""]', "servers.attach[0]: '' is not a URL"),
    ('[30000]', "servers.attach[0]: 30000 is not a URL"),
    ('"http://node7:30000"', "servers.attach: expected a list of URLs"),
    ('[]', "servers: set gpus = [0, 1, ...] or count = N (N >= 1), or attach = "),
])
def test_malformed_attach_entries_are_one_line_naming_the_entry(tmp_path: Path, capsys,
                                                                attach: str, error: str):
    rc, _, err = _check(tmp_path, f'{HEAD}[servers]\nattach = {attach}\n', capsys)
    assert rc == 2
    assert err.startswith("config error: ") and error in err, err
    assert err.count("\n") == 1, err


def test_an_attached_url_on_an_own_servers_port_is_refused():
    with pytest.raises(ConfigError, match=r"servers.attach\[0\]: http://127.0.0.1:30001 is one "
                       r"of the daemon's own servers' ports 30000..30001"):
        parse_config({"servers": {"count": 2, "model_path": "m",
                                  "attach": ["http://127.0.0.1:30001"]},
                      "generation": {"enable_thinking": False}})


def test_own_servers_still_need_a_model_path():
    with pytest.raises(ConfigError, match="servers.model_path: required"):
        parse_config({"servers": {"count": 1, "attach": ["http://node7:30000"]},
                      "generation": {"enable_thinking": False}})
