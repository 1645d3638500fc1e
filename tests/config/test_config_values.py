"""`check` (and every start) validates values, not only keys: GPU ids that cannot be, a
`gpus = []` written beside a count, a host that is neither an address nor a name, ports past
65535, and a key written outside its table, named with the table it was found in and the
one it belongs in."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.commands import check
from supervisor.config import ConfigError, parse_config
from supervisor.servers.launch_command import build_specs
from tests.fixtures.fs_faults import assert_one_line, cli

HEAD = '[generation]\nenable_thinking = false\n'


def _check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "job.toml"
    path.write_text(text)
    rc = check.main(["--config", str(path), "--skip-flag-check"])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("servers, error", [
    ('gpus = [-1, 0]', "servers.gpus: GPU ids are 0 or more, got -1 in [-1, 0]"),
    ('gpus = [0, 3, 3, 1]', "servers.gpus: a GPU is listed twice: [0, 3, 3, 1]"),
    ('gpus = []\ncount = 2', "servers: set either gpus or count, not both (gpus = [], count = 2)"),
    ('gpus = [0, 1]\ncount = 0', "servers: set either gpus or count, not both"),
    ('gpus = []', "servers.gpus: an empty list; list the GPUs"),
    ('count = -2', "servers.count: must be >= 1, got -2"),
    ('count = 2\nhost = "http://127.0.0.1"',
     "servers.host: 'http://127.0.0.1' is not an IP address or a host name (no scheme or path"),
    ('count = 2\nhost = "127.0.0.1:30000"', "(no port here: server i listens on"),
    ('count = 2\nhost = "node 7"', "servers.host: 'node 7' is not an IP address or a host name"),
    ('count = 2\nhost = ""', "servers.host: '' is not an IP address or a host name"),
    ('count = 2\nhost = "-node"', "servers.host: '-node' is not"),
    ('count = 2\nhost = "999.1.1.1.1"', "servers.host: '999.1.1.1.1' is not"),
    ('count = 8\nbase_port = 65530', "servers.base_port: 8 servers need ports 65530..65537, past 65535"),
    ('count = 2\nbase_port = 70000', "servers.base_port: must be a TCP port, got 70000"),
])
def test_check_refuses_values_that_cannot_work(tmp_path: Path, capsys, servers: str, error: str):
    rc, err = _check(tmp_path, f'{HEAD}[servers]\nmodel_path = "m"\n{servers}\n', capsys)
    assert rc == 2
    assert err.startswith("config error: ") and error in err, err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::1", "localhost", "node7.cluster",
                                  "gpu-node-07.example.org."])
def test_addresses_and_host_names_load(host: str):
    cfg = parse_config({"servers": {"count": 1, "model_path": "m", "host": host},
                        "generation": {"enable_thinking": False}})
    [spec] = build_specs(cfg.servers)
    # The daemon's URL for an IPv6 server carries the address in brackets.
    assert spec.base_url == (f"http://[{host}]:30000" if ":" in host else f"http://{host}:30000")


def test_a_key_above_every_table_is_named_with_where_it_belongs(tmp_path: Path, capsys):
    rc, err = _check(tmp_path, f'prompts = "p.jsonl"\n{HEAD}[servers]\ncount = 1\n'
                               'model_path = "m"\n', capsys)
    assert rc == 2
    assert err == ("config error: prompts: a key at the top of the file, outside any table; "
                   "it belongs in [job] (job.prompts): move it under that table's header\n")


def test_a_key_under_the_wrong_table_names_both_tables(tmp_path: Path, capsys):
    # `prompts` written after [servers] lands in [servers]: TOML's rule, an easy slip.
    rc, err = _check(tmp_path, f'{HEAD}[servers]\ncount = 1\nmodel_path = "m"\n'
                               'prompts = "p.jsonl"\n', capsys)
    assert rc == 2
    assert err == ("config error: servers.prompts: unknown key in [servers]; prompts belongs "
                   "in [job] (job.prompts): move it under that table's header\n")
    # A key of two tables names both; one no table has lists the table's own keys.
    with pytest.raises(ConfigError, match=r"quality.concurrency: unknown key in \[quality\]; "
                                          r"concurrency belongs in \[uploads\]"):
        parse_config({"quality": {"concurrency": 2}})
    with pytest.raises(ConfigError, match=r"job.stop_grace_s: unknown key in \[job\]; "
                                          r"stop_grace_s belongs in \[servers\] "
                                          r"\(servers.stop_grace_s\) or \[dispatch\]"):
        parse_config({"job": {"stop_grace_s": 2}})
    with pytest.raises(ConfigError, match=r"job.colour: unknown key \(allowed: keep_token_ids, model, output"):
        parse_config({"job": {"colour": 2}})
    with pytest.raises(ConfigError, match=r"colour: a key at the top of the file, outside any "
                                          r"table, and no table has it \(tables: \[job\]"):
        parse_config({"colour": 2})


def test_the_cli_says_it_in_one_line(tmp_path: Path):
    path = tmp_path / "job.toml"
    path.write_text(f'{HEAD}[servers]\nmodel_path = "m"\ngpus = [0, -3]\n')
    out = cli(["check", "--config", str(path), "--skip-flag-check"])
    assert out.returncode == 2
    assert_one_line(out, "servers.gpus: GPU ids are 0 or more, got -3")


@pytest.mark.parametrize("job, message", [
    ({"keep_token_ids": "some"}, 'job.keep_token_ids: must be "truncated" or "all", got \'some\''),
    ({"shard_output_ids": True}, 'job.shard_output_ids: needs job.keep_token_ids = "all"'),
])
def test_token_ids_keys_are_checked(tmp_path, job, message):
    from supervisor.config.checks import validate
    from supervisor.config.sections import JobConfig, JobSection
    cfg = JobConfig(job=JobSection(**job))
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    assert str(refused.value).startswith(message)
