from __future__ import annotations

from dataclasses import replace

from supervisor.config import DispatchSection, JobConfig, ServersSection
from supervisor.servers.launch_command import (
    build_env,
    build_specs,
    flag_args,
    max_running,
    metrics_off,
)


def _servers(**kw) -> ServersSection:
    base = ServersSection(count=2, model_path="/models/m", base_port=31000)
    return replace(base, **kw)


def test_flag_translation() -> None:
    flags = {"mem-fraction-static": 0.88, "enable-metrics": True, "disable-radix-cache": False,
             "cuda-graph-bs": [1, 2, 4], "max-running-requests": 64, "gone": None}
    assert flag_args(flags) == ["--mem-fraction-static", "0.88", "--enable-metrics",
                                "--cuda-graph-bs", "1", "2", "4", "--max-running-requests", "64"]


def test_one_server_per_gpu() -> None:
    specs = build_specs(_servers(gpus=(2, 5), count=0, flags={"max-running-requests": 48}))
    assert [(s.name, s.gpus, s.port, s.cuda_visible_devices) for s in specs] == [
        ("gpu2", (2,), 31000, "2"), ("gpu5", (5,), 31001, "5")]
    assert list(specs[1].argv) == ["python", "-m", "sglang.launch_server", "--model-path",
                                   "/models/m", "--host", "127.0.0.1", "--port", "31001",
                                   "--stream-interval", "16", "--enable-metrics",
                                   "--max-running-requests", "48"]
    assert specs[0].base_url == "http://127.0.0.1:31000"


def test_tensor_parallel_groups() -> None:
    specs = build_specs(_servers(count=4, tp_size=2))
    assert [(s.name, s.cuda_visible_devices, s.port) for s in specs] == [
        ("gpu0-1", "0,1", 31000), ("gpu2-3", "2,3", 31001)]
    assert specs[0].argv[-5:-3] == ("--tp-size", "2")


def test_env_drops_notify_socket_and_sets_devices() -> None:
    spec = build_specs(_servers(count=4, tp_size=2))[1]
    env = build_env(spec, {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1", "PATH": "/bin",
                           "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "2,3", "PYTHONUNBUFFERED": "1"}


def test_max_running_follows_config_then_flag_else_the_server_says() -> None:
    # No flag: only the server knows (server_slots.py reads it from /server_info).
    assert max_running(_servers(), DispatchSection()) is None
    assert max_running(_servers(flags={"max-running-requests": 64}), DispatchSection()) == 64
    assert max_running(_servers(flags={"max-running-requests": 64}),
                       DispatchSection(max_in_flight_per_server=10)) == 10


def test_job_config_defaults_build() -> None:
    cfg = replace(JobConfig(), servers=_servers(count=8))
    assert [s.name for s in build_specs(cfg.servers)] == [f"gpu{i}" for i in range(8)]


def test_a_chunk_per_16_tokens_unless_the_job_sets_the_stream_interval() -> None:
    # SGLang streams a chunk per decode step by default; the daemon asks for 16 tokens a
    # chunk (launch_command.DEFAULT_STREAM_INTERVAL says why) unless the job says otherwise.
    [spec] = build_specs(_servers(count=1))
    assert list(spec.argv[-3:-1]) == ["--stream-interval", "16"]
    [own] = build_specs(_servers(count=1, flags={"stream-interval": 1}))
    assert own.argv.count("--stream-interval") == 1 and own.argv[-2:] == ("--stream-interval", "1")


def test_metrics_on_unless_the_job_switches_them_off() -> None:
    # SGLang 0.5.23 serves /metrics only with --enable-metrics (server_args.py enable_metrics,
    # default False): without them the over-commit flag and the saturation guard see nothing.
    on = build_specs(_servers(count=1))[0].argv
    assert on.count("--enable-metrics") == 1 and not metrics_off(_servers())
    kept = build_specs(_servers(count=1, flags={"enable-metrics": True}))[0].argv
    assert kept.count("--enable-metrics") == 1
    off = _servers(count=1, flags={"enable-metrics": False})
    assert "--enable-metrics" not in build_specs(off)[0].argv and metrics_off(off)
