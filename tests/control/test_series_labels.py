"""/metrics as Prometheus' naming rules want it, read back with prometheus_client's parser:
`job` and `partition` on every series, counters ending `_total`, gauges never, base units
in the names; the job label's default; control.metrics_listen's refusals."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.config import ConfigError, JobConfig, parse_config
from supervisor.config.listen_address import ListenAddress, parse_listen
from supervisor.control.metrics import RestartCauses, render
from supervisor.control.series_labels import job_name
from tests.fixtures import status_samples as samples

# Prometheus' base units: seconds, bytes, joules, watts, celsius, ratios (0..1).
NOT_BASE = re.compile(r"_(kwh|wh|kilowatts?|milliseconds|ms|minutes|hours|percent|pct|kb|mb|gb|"
                      r"kib|mib|gib)(_|$)")


def _config(data: dict) -> JobConfig:
    return parse_config({"servers": {"count": 1, "model_path": "/models/m"},
                         "generation": {"enable_thinking": False}, **data})


def families(**changes: object) -> list:
    s = replace(samples.status(servers=2), **changes)  # type: ignore[arg-type]
    causes = RestartCauses()
    text = render(s, (10, 100), causes, {"gpu0": (5, 1), "gpu1": (7, 0)}).decode()
    return list(text_string_to_metric_families(text))


def test_every_series_carries_the_job_and_the_partition() -> None:
    got = families(job_name="run-01", partition="3/20")
    samples_all = [s for f in got for s in f.samples]
    assert len(samples_all) > 50
    assert {(s.labels["job"], s.labels["partition"]) for s in samples_all} == {("run-01", "3/20")}


def test_a_one_node_job_is_partition_0_of_1() -> None:
    got = families(job_name=None, partition=None)
    assert {(s.labels["job"], s.labels["partition"]) for f in got for s in f.samples} == {
        ("dflash", "0/1")}


def test_counters_end_in_total_and_names_use_base_units() -> None:
    got = families(job_name="run-01")
    assert {f.type for f in got} == {"counter", "gauge"}
    for f in got:
        assert f.name.startswith("dflash_") and not NOT_BASE.search(f.name), f.name
        for s in f.samples:
            if f.type == "counter":
                assert s.name == f.name + "_total", s.name
            else:
                assert s.name == f.name and not s.name.endswith("_total"), s.name
    names = {f.name for f in got}
    assert {"dflash_energy_used_joules", "dflash_gpu_utilization_ratio"} <= names


def test_energy_is_in_joules_and_utilisation_a_ratio() -> None:
    got = {s.name: s for f in families() for s in f.samples}
    s = samples.status(servers=2)
    assert s.energy is not None
    assert got["dflash_energy_used_joules"].value == pytest.approx(s.energy.kwh_so_far * 3.6e6)
    assert got["dflash_gpu_utilization_ratio"].value == pytest.approx(0.97)


def test_each_server_is_in_one_state() -> None:
    got = [s for f in families() for s in f.samples if s.name == "dflash_server_state"]
    on = sorted((s.labels["server"], s.labels["state"]) for s in got if s.value == 1)
    assert on == [("gpu0", "READY"), ("gpu1", "READY")] and len(got) > len(on)


@pytest.mark.parametrize("output,metrics_job,expected", [
    ("s3://bucket/datasets/run-01/", "", "run-01"), ("s3://bucket", "", "bucket"),
    ("/data/out/run-7", "", "run-7"), ("shards", "mine", "mine")])
def test_the_job_label_defaults_to_the_outputs_last_part(output: str, metrics_job: str,
                                                        expected: str) -> None:
    cfg = _config({"job": {"output": output}, "control": {"metrics_job": metrics_job}})
    assert job_name(cfg) == expected


def test_metrics_listen_takes_host_and_port() -> None:
    assert parse_listen("0.0.0.0:9464") == ListenAddress("0.0.0.0", 9464)
    assert str(parse_listen("[::1]:9464")) == "[::1]:9464"
    cfg = _config({"control": {"metrics_listen": "127.0.0.1:9464"}})
    assert cfg.control.metrics_listen == "127.0.0.1:9464"


@pytest.mark.parametrize("text,says", [
    (":9464", "expected host:port"), ("9464", "expected host:port"),
    ("localhost:9464", "must be an IP address"), ("::1:9464", "in brackets"),
    ("[nope]:9464", "not an IPv6 address"), ("127.0.0.1:0", "1..65535"),
    ("127.0.0.1:http", "1..65535"), ("127.0.0.1:70000", "1..65535")])
def test_a_bad_metrics_listen_is_refused_in_one_line(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        _config({"control": {"metrics_listen": text}})
    assert str(e.value).startswith("control.metrics_listen: ") and says in str(e.value)
    assert "\n" not in str(e.value)
