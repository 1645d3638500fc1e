"""`dflash-supervisor check --config PATH`: validate a config and show what would run.

Prints each server's exact command line and CUDA_VISIBLE_DEVICES, and the config's warnings.
It then puts the pass-through flags to the installed SGLang's own argument parser
(supervisor/sglang/flag_check.py, the same check the daemon makes at start), because SGLang
renames flags between releases and a typo would otherwise surface as eight servers failing at
start. A launch command of another shape (a wrapper script) is asked for its `--help`
instead, where SGLang is installed here, and every flag is looked up in it.

It says what the config names that is not on this node (node_paths.py: an error where the
daemon would fail, a warning where it may appear later, a note for a model SGLang fetches),
when the GPU indices could not be checked (no NVML), with thinking on, each attached
server's reasoning parser as its /server_info says (refused when it has none), and the
`[servers.flags]` lines of the flags a tuner's search kept in the state DB.

It also makes the start's check of the output directory (a file, or not writable: refused)
and, while no state DB exists, refuses shard files already in a local output (the daemon
would refuse to start over them).

Exit status: 0 fine, 1 flags the launch command does not accept, 2 the config is invalid
(or its output directory unusable).
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import logging
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence

from supervisor.commands.node_paths import node_paths
from supervisor.config import ConfigError, JobConfig, check_gpus_exist, load_config
from supervisor.config.attach_urls import attach_targets
from supervisor.gpu.visible_devices import visible_devices
from supervisor.job.attached_thinking import attached_parsers, refusal
from supervisor.servers.flag_gate import sglang_verdict
from supervisor.servers.launch_command import build_specs, max_running, server_devices
from supervisor.sglang.flag_check import FlagVerdict
from supervisor.tune.kept_flags import kept_flag_lines

HelpProvider = Callable[[Sequence[str]], str]

_OPTION = re.compile(r"(?<![\w-])--[A-Za-z0-9][A-Za-z0-9_-]*")


def run_help(command: Sequence[str]) -> str:
    """The launch command's --help text (SGLang imports torch: this takes a while)."""
    out = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=300,
                         stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise RuntimeError(f"{shlex.join([*command, '--help'])} exited with {out.returncode}: "
                           f"{out.stderr.strip()[-500:]}")
    return out.stdout


def accepted_options(help_text: str) -> set[str]:
    return set(_OPTION.findall(help_text))


def unknown_flags(flags: Iterable[str], accepted: set[str]) -> list[str]:
    """One line per flag the launch command does not accept, with a suggestion if close."""
    problems = []
    for name in flags:
        option = f"--{name}"
        if option in accepted:
            continue
        close = difflib.get_close_matches(option, sorted(accepted), n=1, cutoff=0.7)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(f"servers.flags.{name}: {option} is not accepted by the launch command{hint}")
    return problems


def describe(cfg: JobConfig) -> list[str]:
    lines = []
    mr = max_running(cfg.servers, cfg.dispatch)
    slots = (f"{mr} requests in flight" if mr is not None
             else "requests in flight as SGLang reports on /server_info")
    for spec in build_specs(cfg.servers):
        log_path = cfg.path(cfg.servers.log_dir) / f"{spec.name}.log"
        devices = server_devices(spec)
        given = "" if devices == spec.cuda_visible_devices else \
            f" (the scheduler's {devices}, from this shell's CUDA_VISIBLE_DEVICES)"
        lines.append(f"{spec.name}: GPUs {spec.cuda_visible_devices}{given}, port {spec.port}, "
                     f"{slots}, log {log_path}")
        lines.append(f"  CUDA_VISIBLE_DEVICES={devices} {shlex.join(spec.argv)}")
    for target in attach_targets(cfg.servers.attach):
        lines.append(f"{target.name}: attached {target.url} (not launched, restarted or stopped "
                     "by the daemon), requests in flight as SGLang reports on /server_info")
    return lines


def _unchecked_gpus(cfg: JobConfig, device_count: int | None) -> list[str]:
    """A line when the GPU indices could not be held against the node (check_gpus_exist)."""
    if (not cfg.servers.own_servers or device_count is not None or visible_devices() is not None
            or any("supervisor.sim" in part for part in cfg.servers.command)):
        return []
    return [f"servers: GPU indices {', '.join(map(str, cfg.servers.gpu_list))} not checked: "
            "no NVML here (no NVIDIA driver, or pynvml missing), so the node's GPU count is "
            "not known"]


def _parser_problems(cfg: JobConfig, verdict: FlagVerdict) -> list[str]:
    """SGLang's own refusal first, then each flag its parser does not know, with a close name."""
    problems = [f"servers.flags: SGLang's parser refuses them: {verdict.detail}"]
    if verdict.options:
        problems += unknown_flags(cfg.servers.flags, set(verdict.options))
    return problems


def _help_problems(cfg: JobConfig, help_provider: HelpProvider) -> tuple[list[str], str] | int:
    command = cfg.servers.command
    try:
        accepted = accepted_options(help_provider(command))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"could not check flags: {exc}", file=sys.stderr)
        return 1
    return (unknown_flags(cfg.servers.flags, accepted),
            f"all {len(cfg.servers.flags)} accepted by {shlex.join(command)} --help")


def main(argv: Sequence[str] | None = None, help_provider: HelpProvider | None = None,
         flag_checker: Callable[[JobConfig], FlagVerdict] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dflash-supervisor check",
                                     description="Validate a job config and print the server commands.")
    parser.add_argument("--config", required=True, help="the job's TOML config")
    parser.add_argument("--skip-flag-check", action="store_true",
                        help="do not ask SGLang's parser (or the launch command's --help)")
    args = parser.parse_args(argv)
    # The config's warnings are logged by load_config: shown here as "WARNING: <file>: ...".
    logging.basicConfig(format="%(levelname)s: %(message)s", stream=sys.stderr)
    try:
        cfg = load_config(args.config)
        from supervisor.gpu.nvml_source import node_gpu_count
        gpus = node_gpu_count()
        check_gpus_exist(cfg, gpus)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    # The start's own check of the output directory (as the user running `check`: run it
    # as the service user to check that user's permissions).
    from supervisor.job.output_paths import output_dir_problem, stray_shards, stray_shards_message
    problem = output_dir_problem(cfg)
    if problem is not None:
        print(f"config error: {problem}", file=sys.stderr)
        return 2
    stray = stray_shards(cfg)
    if stray:
        print(f"config error: {stray_shards_message(cfg, stray, args.config)}", file=sys.stderr)
        return 2
    found = node_paths(cfg)
    attached = attached_parsers(cfg)
    refused = refusal(attached)
    for error in found.errors + ([refused] if refused else []):
        print(f"config error: {error}", file=sys.stderr)
    for warning in found.warnings + _unchecked_gpus(cfg, gpus):
        print(f"warning: {warning}", file=sys.stderr)
    failed = bool(found.errors or refused)
    # The commands are worth seeing either way: they are what the daemon would run.
    print(f"config NOT OK (errors above): {args.config}" if failed else f"config OK: {args.config}")
    for line in (describe(cfg) + found.notes + [a.line() for a in attached]
                 + kept_flag_lines(cfg)):
        print(line)
    if failed:
        return 2
    if args.skip_flag_check or not cfg.servers.own_servers:
        return 0
    if help_provider is None:
        verdict = (flag_checker or (lambda c: sglang_verdict(c.servers)))(cfg)
        if verdict.accepted is not None:
            problems, ok = (([], verdict.detail) if verdict.accepted
                            else (_parser_problems(cfg, verdict), ""))
        elif importlib.util.find_spec("sglang") is None:
            print(f"SGLang is not installed here: flags not checked ({verdict.detail})")
            return 0
        else:
            # A wrapper script around SGLang: its --help is what there is to go by.
            found = _help_problems(cfg, run_help)
            if isinstance(found, int):
                return found
            problems, ok = found
    else:
        found = _help_problems(cfg, help_provider)
        if isinstance(found, int):
            return found
        problems, ok = found
    if cfg.servers.tp_size > 1 and ({"tp-size", "tp"} & set(cfg.servers.flags)):
        problems.append("servers.flags: tp-size is set from servers.tp_size; remove it from flags")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print(f"flags OK: {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
