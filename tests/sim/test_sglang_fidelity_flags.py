"""Launch flags parsed by SGLang 0.5.23's own parser: unknown, ambiguous and prefixed flags,
required ones, choices.

Part of the simulator's fidelity tests (test_sglang_fidelity_*.py): each test is one fact
read from SGLang 0.5.23's own source, its docstring naming the file (path under `sglang/`);
every test runs the real simulator process (`python -m supervisor.sim`) on loopback.
"""

from __future__ import annotations

import subprocess
import sys

from tests.sim.sglang_calls import get


def _launch(*flags: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "supervisor.sim", *flags],
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_unknown_flag_exits_2_with_argparse_message():
    """sglang/srt/server_args.py prepare_server_args: argparse.ArgumentParser(prog="sglang
    serve").parse_args, so an unknown flag exits 2 with "unrecognized arguments"."""
    r = _launch("--model-path", "m", "--port", "1", "--no-such-flag", "3")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == \
        "sglang serve: error: unrecognized arguments: --no-such-flag 3"


def test_cuda_graph_max_bs_is_an_ambiguous_option_in_0_5_23():
    """sglang/srt/arg_groups/fields/exec_.py has only --cuda-graph-max-bs-decode and
    --cuda-graph-max-bs-prefill; argparse's default allow_abbrev makes the old
    --cuda-graph-max-bs a prefix of both: "ambiguous option", exit 2."""
    r = _launch("--model-path", "m", "--port", "1", "--cuda-graph-max-bs", "64")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")


def test_unique_prefix_is_accepted(sim_server):
    """argparse allow_abbrev (on in sglang/srt/server_args.py's parser): a unique prefix
    such as --max-running is --max-running-requests."""
    sim = sim_server("--sim-instant", "--max-running", "5", "--cuda-graph-max-bs-decode", "8")
    info = get(sim.base_url, "/server_info").json()
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 5


def test_model_path_is_required():
    """sglang/srt/arg_groups/fields/model.py: model_path has no default, so argparse
    requires --model-path (alias --model)."""
    r = _launch("--port", "1")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == \
        "sglang serve: error: the following arguments are required: --model-path/--model"


def test_reasoning_parser_choices():
    """sglang/srt/server_args.py add_cli_args: --reasoning-parser choices are "auto" plus
    sglang/srt/parser/reasoning_parser_names.py."""
    r = _launch("--model-path", "m", "--port", "1", "--reasoning-parser", "qwen9")
    assert r.returncode == 2
    assert "argument --reasoning-parser: invalid choice: 'qwen9'" in r.stderr
