"""The offline measurement a flag search is checked against (issue 39 items 7 and 8): for one
server command and one flag, a server per candidate value, each loaded the same way, and the
value that gives the most output tokens a second.

Every candidate's server is started at once with the base flags and `--FLAG VALUE` (its own
process group, log to a file); once each answers /health_generate and one warm-up request
(not measured), `--repeats` rounds follow, each a pass on every candidate in turn (the order
rotated each round, so a shared machine's drift spreads over all of them). A pass:
`--requests` chat requests (first turns of the MT-bench
and Vicuna-bench questions in ../shared/data, read at run time, never copied), at most
`--concurrency` in flight (so with a candidate below it the server queues, as under a job),
thinking on, `--max-tokens` each. Output tok/s = completion tokens / wall time, first
request to last answer; a candidate's figure is the median of its repeats. A candidate
that does not start (or dies under load) is reported with the daemon's exit classifier's
verdict on its log (an OOM cliff is a result, not an error).

    # the simulator's flag-response model (supervisor/sim/README.md, "Flag response"):
    python benchmarks/bench_tune_offline.py --server sim --values 2,4,8,16,32 \\
        --server-flags "--sim-batch-peak 8 --sim-tokens-per-s 50 --sim-time-scale 20"
    # real SGLang 0.5.23 on CPU (/var/tmp/sglang-cpu, set up by ../shared/tools/sglang-cpu):
    python benchmarks/bench_tune_offline.py --server cpu --values 1,2,4,8 \\
        --requests 16 --max-tokens 48 --repeats 2

The simulator's defaults take about 10 s a candidate; the CPU server 20-40 s to load and
~50-300 tok/s on its tiny random model, so keep its runs small. Timings on a shared machine
move with its load: the script prints the 1-minute load average at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from supervisor.demo.free_ports import free_port  # noqa: E402
from supervisor.servers.exit_classifier import Trigger, classify  # noqa: E402
from supervisor.sim.launch import kill_group, wait_healthy  # noqa: E402

# Beside the repository (../shared/data from the main checkout; a worktree under wt/ sits
# one level deeper), or where DFLASH_REAL_PROMPT_SETS says.
SHARED_DATA_CANDIDATES = [Path(os.environ["DFLASH_REAL_PROMPT_SETS"])] \
    if "DFLASH_REAL_PROMPT_SETS" in os.environ else \
    [ROOT.parent / "shared" / "data", ROOT.parents[1] / "shared" / "data"]
PROMPT_FILES = ("mt_bench_questions.jsonl", "vicuna_bench_questions.jsonl")
SGLANG_CPU = Path(os.environ.get("SGLCPU_DIR", "/var/tmp/sglang-cpu"))
# The CPU build's flags (`sglang-cpu env`), a KV pool of 4,096 tokens, and --sleep-on-idle
# (an idle CPU scheduler otherwise spins a core; tests/fixtures/real_sglang.py says why).
CPU_FLAGS = ("--device cpu --attention-backend torch_native --sampling-backend pytorch "
             "--mem-fraction-static 0.1 --max-total-tokens 4096 --context-length 2048 "
             "--sleep-on-idle")
REQUEST_TIMEOUT_S = 600.0


@dataclass
class Candidate:
    value: str
    rates: list[float] = field(default_factory=list)      # output tok/s, one per repeat
    effective_running: int | None = None                  # /server_info's, per DP rank
    failed: str | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.rates) if self.rates else None


def questions(limit: int) -> list[str]:
    """First turns of both prompt sets, interleaved (a mix of short and long prompts)."""
    data = next((d for d in SHARED_DATA_CANDIDATES if d.is_dir()), SHARED_DATA_CANDIDATES[0])
    sets = []
    for name in PROMPT_FILES:
        path = data / name
        if not path.is_file():
            raise SystemExit(f"prompt set not found: {path} (set DFLASH_REAL_PROMPT_SETS)")
        sets.append([json.loads(line)["turns"][0]
                     for line in path.read_text(encoding="utf-8").splitlines() if line.strip()])
    mixed = [q for pair in zip(*sets) for q in pair]
    return [mixed[i % len(mixed)] for i in range(limit)]


def server_argv(kind: str, port: int, flags: list[str]) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    if kind == "sim":
        return ([sys.executable, "-m", "supervisor.sim", "--model-path", "sim/bench-model",
                 "--host", "127.0.0.1", "--port", str(port), *flags], env)
    python = SGLANG_CPU / "venv" / "bin" / "python"
    if not python.exists() or not (SGLANG_CPU / "tiny").is_dir():
        raise SystemExit(f"no SGLang CPU server at {SGLANG_CPU} (run ../shared/tools/sglang-cpu)")
    env["SGLANG_USE_CPU_ENGINE"] = "1"
    return ([str(python), "-m", "sglang.launch_server", "--model-path", str(SGLANG_CPU / "tiny"),
             "--host", "127.0.0.1", "--port", str(port), *shlex.split(CPU_FLAGS), *flags], env)


async def load_once(base_url: str, prompts: list[str], concurrency: int,
                    max_tokens: int) -> float:
    """Output tok/s over one pass of `prompts`, at most `concurrency` in flight."""
    limiter = anyio.Semaphore(concurrency)
    tokens = 0
    async with httpx.AsyncClient(base_url=base_url, trust_env=False,
                                 timeout=REQUEST_TIMEOUT_S) as client:
        errors: list[httpx.HTTPError] = []

        async def one(text: str, tg: anyio.abc.TaskGroup) -> None:
            nonlocal tokens
            async with limiter:
                try:
                    r = await client.post("/v1/chat/completions", json={
                        "messages": [{"role": "user", "content": text}],
                        "max_tokens": max_tokens})
                    r.raise_for_status()
                except httpx.HTTPError as e:     # the server died under load: the pass ends
                    errors.append(e)
                    tg.cancel_scope.cancel()
                    return
                tokens += r.json()["usage"]["completion_tokens"]

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for text in prompts:
                tg.start_soon(one, text, tg)
        if errors:
            raise errors[0]
        return tokens / (time.monotonic() - started)


@dataclass
class Server:
    """One candidate's server, started before any is measured."""
    cand: Candidate
    proc: subprocess.Popen
    base: str
    log_path: Path


def start(args: argparse.Namespace, value: str, logs: Path) -> Server:
    port = free_port()
    flags = [*shlex.split(args.server_flags), f"--{args.flag}", value]
    argv, env = server_argv(args.server, port, flags)
    log_path = logs / f"{args.flag}-{value}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return Server(Candidate(value), proc, f"http://127.0.0.1:{port}", log_path)


def ready(args: argparse.Namespace, server: Server, prompts: list[str]) -> None:
    """Healthy, its resolved running count read, one warm-up request (not measured)."""
    try:
        wait_healthy(server.base, server.proc, timeout_s=args.ready_timeout_s, poll_s=0.5)
        info = httpx.get(server.base + "/server_info", timeout=30, trust_env=False).json()
        server.cand.effective_running = info["internal_states"][0].get(
            "effective_max_running_requests_per_dp")
        anyio.run(load_once, server.base, prompts[:1], 1, args.max_tokens)
    except (RuntimeError, httpx.HTTPError) as e:
        fail(server, e)


def one_pass(args: argparse.Namespace, server: Server, prompts: list[str]) -> None:
    try:
        server.cand.rates.append(anyio.run(load_once, server.base, prompts, args.concurrency,
                                           args.max_tokens))
    except (RuntimeError, httpx.HTTPError) as e:
        fail(server, e)


def fail(server: Server, error: Exception) -> None:
    server.cand.failed = _why(server.proc, server.log_path, error)
    kill_group(server.proc, wait_s=30)


def measure_all(args: argparse.Namespace, values: list[str], prompts: list[str],
                logs: Path) -> list[Candidate]:
    """Every candidate's server up at once (idle ones cost nothing: the simulator waits,
    SGLang sleeps with --sleep-on-idle), then rounds of one pass each, the order rotated
    every round: a shared machine's load drifts, and alternating passes spreads the drift
    over every candidate instead of handing it to whichever ran last."""
    servers = [start(args, value, logs) for value in values]
    try:
        for server in servers:
            ready(args, server, prompts)
        for round_ in range(args.repeats):
            for i in range(len(servers)):
                server = servers[(i + round_) % len(servers)]
                if server.cand.failed is None:
                    one_pass(args, server, prompts)
    finally:
        for server in servers:
            kill_group(server.proc, wait_s=30)
    return [s.cand for s in servers]


def _why(proc: subprocess.Popen, log_path: Path, error: Exception) -> str:
    """The daemon's verdict when the server died; else what the client saw."""
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.returncode is None:
        return f"{type(error).__name__}: {str(error)[:200]}"
    lines = log_path.read_text(errors="replace").splitlines()
    reason = classify(Trigger.EXITED, proc.returncode, lines)
    return str(reason)[:240]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", choices=("sim", "cpu"), default="sim")
    p.add_argument("--flag", default="max-running-requests",
                   help="the SGLang flag searched, without its dashes")
    p.add_argument("--values", default="2,4,8,16,32", help="candidate values, comma-separated")
    p.add_argument("--server-flags", default="--sim-batch-peak 8 --sim-tokens-per-s 50 "
                   "--sim-time-scale 20",
                   help="flags every candidate gets (the default is the simulator's; for "
                        "--server cpu give '' or your own)")
    p.add_argument("--requests", type=int, default=128, help="requests a repeat")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight at most")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ready-timeout-s", type=float, default=None,
                   help="a candidate not healthy by then failed (60 s sim, 300 s cpu)")
    args = p.parse_args()
    if args.server == "cpu" and args.server_flags.startswith("--sim-"):
        args.server_flags = ""           # the simulator's default means nothing to SGLang
    if args.ready_timeout_s is None:
        args.ready_timeout_s = 60.0 if args.server == "sim" else 300.0
    values = [v.strip() for v in args.values.split(",") if v.strip()]
    if not values or args.requests < 1 or args.concurrency < 1 or args.repeats < 1:
        raise SystemExit("--values, --requests, --concurrency and --repeats must be non-empty "
                         "and >= 1")
    prompts = questions(args.requests)
    print(f"server {args.server}, flag --{args.flag} in {values}, {args.requests} requests x "
          f"{args.repeats} repeats, {args.concurrency} in flight, max tokens {args.max_tokens}, "
          f"base flags {args.server_flags!r}; load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        results = measure_all(args, values, prompts, Path(tmp))
    for cand in results:
        figure = (f"{cand.median:9.1f} tok/s median of " + ", ".join(f"{r:.1f}" for r in cand.rates)
                  if cand.failed is None else f"failed ({cand.failed})")
        print(f"  --{args.flag} {cand.value:>6}: running {cand.effective_running}, {figure}")
    measured = [c for c in results if c.median is not None]
    print(f"load average {os.getloadavg()[0]:.1f}")
    if not measured:
        raise SystemExit("no candidate could be measured")
    best = max(measured, key=lambda c: c.median or 0.0)
    print(f"best: --{args.flag} {best.value} ({best.median:.1f} tok/s)")


if __name__ == "__main__":
    main()
