"""The job config: the documented example parses, every mistake is refused with the key named
and what is allowed, and the CLI turns a broken file into one clear line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.config import ConfigError, Partition, load_config, parse_config, with_flags
from tests.fixtures import REPO

# Thinking off: thinking on needs a reasoning-parser flag (tests/config/test_config_refusals.py).
BASE = {"servers": {"count": 2, "model_path": "/models/m"},
        "generation": {"enable_thinking": False}}


def _with(section: str, **values) -> dict:
    data = {k: dict(v) for k, v in BASE.items()}
    data.setdefault(section, {}).update(values)
    return data


def test_the_example_config_parses_with_its_documented_values():
    cfg = load_config(REPO / "systemd" / "example-config.toml")
    assert cfg.job.output.startswith("s3://") and cfg.output_is_s3
    assert cfg.servers.gpu_list == (0, 1, 2, 3, 4, 5, 6, 7)
    assert cfg.servers.max_running_requests() == 48
    assert cfg.servers.flags["max-mamba-cache-size"] == 160
    assert cfg.generation.enable_thinking is True


def test_defaults_and_relative_paths(tmp_path: Path):
    cfg = parse_config(BASE, base_dir=tmp_path)
    assert (cfg.job.shard_size, cfg.generation.max_tokens, cfg.dispatch.max_attempts) == (500, 4096, 3)
    assert cfg.servers.command == ("python", "-m", "sglang.launch_server")
    assert cfg.path(cfg.job.state) == tmp_path / "job.db"
    assert cfg.path("/abs/x") == Path("/abs/x")
    assert cfg.servers.gpu_list == (0, 1)


@pytest.mark.parametrize("data, fragment", [
    ({**BASE, "jobs": {}}, "[jobs]: unknown section (allowed: [job]"),
    (_with("job", shard_sise=10), "job.shard_sise: unknown key (allowed: keep_token_ids, model, output, partition"),
    (_with("job", shard_size="500"), "job.shard_size: expected an integer, got '500'"),
    (_with("job", shard_size=0), "job.shard_size: must be > 0"),
    (_with("job", partition="3/2"), "job.partition: need 0 <= I < N"),
    (_with("job", partition="half"), "job.partition: expected I/N"),
    (_with("job", output="gs://bucket/x"), "job.output: a local directory or s3://bucket/prefix/"),
    (_with("job", output="s3:///x"), "job.output: no bucket"),
    (_with("generation", max_tokens=True), "generation.max_tokens: expected an integer"),
    (_with("generation", temperature=3), "generation.temperature: must be within 0..2"),
    (_with("generation", top_p=0), "generation.top_p: must be within (0, 1]"),
    (_with("generation", enable_thinking="yes"), "generation.enable_thinking: expected true or false"),
    ({"servers": {"model_path": "m"}}, "servers: set gpus = [0, 1, ...] or count = N"),
    ({"servers": {"count": 1}}, "servers.model_path: required"),
    ({"servers": {"gpus": [0, 0], "model_path": "m"}}, "servers.gpus: a GPU is listed twice"),
    ({"servers": {"gpus": [0, 1], "count": 2, "model_path": "m"}}, "either gpus or count"),
    ({"servers": {"count": 3, "tp_size": 2, "model_path": "m"}}, "servers.tp_size: 3 GPUs do not split"),
    (_with("servers", base_port=70000), "servers.base_port: must be a TCP port"),
    (_with("servers", command=[]), "servers.command: expected a non-empty list of strings"),
    (_with("servers", flags={"--port": 1}), "without the leading dashes"),
    (_with("servers", flags={"port": 1}), "servers.flags.port: set by the supervisor"),
    (_with("servers", flags={"max-running-requests": 0}),
     "servers.flags.max-running-requests: must be an integer >= 1"),
    (_with("servers", flags={"x": {"y": 1}}), "servers.flags.x: a flag value is a string"),
    (_with("servers", hang_timeout_s=-1), "servers.hang_timeout_s: must be > 0"),
    (_with("dispatch", max_in_flight_per_server=-1), "dispatch.max_in_flight_per_server: must be >= 0"),
    (_with("dispatch", queue_ahead=-1), "dispatch.queue_ahead: must be an integer >= 0"),
    (_with("quality", min_samples=500), "quality.min_samples: must be within 1..quality.window"),
    (_with("quality", max_bad_rate=1.5), "quality.max_bad_rate: must be within (0, 1]"),
    (_with("uploads", multipart_threshold_bytes=1024),
     "uploads.multipart_threshold_bytes: S3 parts are at least 5 MiB"),
    ({"servers": []}, "[servers]: expected a table"),
])
def test_bad_values_are_refused_naming_the_key(data, fragment):
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    assert fragment in str(exc.value)


def test_files_that_are_not_toml_or_not_utf8_or_missing(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[job\nprompts = 1\n")
    with pytest.raises(ConfigError, match="bad.toml: not valid TOML"):
        load_config(bad)
    bad.write_bytes(b"[job]\nmodel = \"\xff\"\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(bad)
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.toml")


def test_retune_merges_flags_removes_with_none_and_validates():
    cfg = parse_config(_with("servers", flags={"max-running-requests": 32, "dtype": "bf16"}))
    new = with_flags(cfg, {"max-running-requests": 64, "max-mamba-cache-size": 200, "dtype": None})
    assert dict(new.servers.flags) == {"max-running-requests": 64, "max-mamba-cache-size": 200}
    assert cfg.servers.flags["max-running-requests"] == 32          # the original is untouched
    with pytest.raises(ConfigError, match="max-running-requests"):
        with_flags(cfg, {"max-running-requests": "lots"})


def test_partition_round_trips():
    assert str(Partition.parse("2/8")) == "2/8"


def test_the_cli_refuses_a_broken_config_with_one_line_and_exit_2(tmp_path: Path):
    cfg = tmp_path / "job.toml"
    cfg.write_text('[servers]\ncount = 1\nmodel_path = "m"\nmax_failure = 3\n')
    for cmd in ("run", "check"):
        out = subprocess.run([sys.executable, "-m", "supervisor", cmd, "--config", str(cfg)],
                             capture_output=True, text=True, timeout=60, cwd=REPO)
        assert out.returncode == 2, (cmd, out.stderr)
        assert "servers.max_failure: unknown key" in out.stderr
        assert "Traceback" not in out.stderr
