"""What a config names on the node's disk, found or missing, for `check`.

Each thing gets a line only when there is something to say: an error where the daemon would
fail at start (no prompt file to import into a new state DB, a launch command path that does
not exist, a log directory it cannot create), a warning where the thing may still appear on
the node before the servers start (a model directory on a mount not there yet, a launch
command looked up on the service's PATH, which may not be this shell's), and a note where
SGLang itself fetches what is missing (a model path that reads as a hub id).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from supervisor.config import JobConfig

# `org/name` as the model hub spells a repository; SGLang (through transformers' loaders)
# downloads such a path that is not a local directory into the hub cache at start.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class NodePaths:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _simulated(cfg: JobConfig) -> bool:
    # The simulator loads no model and needs no GPU: its "model path" is only a label.
    return any("supervisor.sim" in part for part in cfg.servers.command)


def _creatable(directory: Path) -> str | None:
    """Why this user cannot have `directory` (made with its parents), or None."""
    if directory.exists():
        if not directory.is_dir():
            return f"{directory} is not a directory"
        return None if os.access(directory, os.W_OK | os.X_OK) else \
            f"{directory} is not writable by this user"
    parent = directory.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{directory} cannot be made: {parent} is a file"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{directory} does not exist and {parent} is not writable by this user"
    return None


def _model(cfg: JobConfig, found: NodePaths) -> None:
    model = cfg.servers.model_path
    local = Path(model).expanduser()
    if local.is_dir():
        return
    if local.exists():
        found.warnings.append(f"servers.model_path: {model} is a file, not a model directory")
    elif _HUB_ID.match(model):
        found.notes.append(f"servers.model_path: {model} is not a local directory: SGLang "
                           "fetches it from the model hub at start (it needs the network, and "
                           "disk in the hub cache for the whole model)")
    else:
        found.warnings.append(f"servers.model_path: {model} does not exist here: SGLang "
                              "cannot load it unless it is there when the servers start")


def _command(cfg: JobConfig, found: NodePaths) -> None:
    program = cfg.servers.command[0]
    if os.path.isabs(program):
        path = Path(program)
        if not path.is_file():
            found.errors.append(f"servers.command: {program} does not exist: no server can "
                                "be launched")
        elif not os.access(path, os.X_OK):
            found.errors.append(f"servers.command: {program} is not executable")
    elif "/" not in program and shutil.which(program) is None:
        found.warnings.append(f"servers.command: {program} is not on this shell's PATH (the "
                              "service's PATH may differ; a full path says for sure)")


def node_paths(cfg: JobConfig) -> NodePaths:
    found = NodePaths()
    prompts, state = cfg.path(cfg.job.prompts), cfg.path(cfg.job.state)
    if not prompts.is_file():
        if state.exists():
            found.warnings.append(f"job.prompts: {prompts} does not exist (the state DB "
                                  f"{state} already holds the job's prompts)")
        else:
            found.errors.append(f"job.prompts: {prompts} does not exist: a new job imports "
                                "its prompts from it at start")
    if not cfg.servers.own_servers:
        return found
    log_problem = _creatable(cfg.path(cfg.servers.log_dir))
    if log_problem is not None:
        found.errors.append(f"servers.log_dir: {log_problem}")
    if not _simulated(cfg):
        _model(cfg, found)
    _command(cfg, found)
    return found
