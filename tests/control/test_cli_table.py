"""Every `dflash-supervisor` command is one row of supervisor/commands/cli.py's table, run by its
module's `main(argv)`; each parses its own arguments (`COMMAND --help` is its own)."""

from __future__ import annotations

import importlib
import inspect

import pytest

from supervisor.commands.cli import COMMANDS, VERIFY_STATE, entry_point
from tests.fixtures.fs_faults import cli


def test_every_row_names_a_module_with_a_main_taking_argv() -> None:
    for name, (module, text) in COMMANDS.items():
        main = importlib.import_module(module).main
        assert list(inspect.signature(main).parameters)[0] == "argv", name
        assert text and "\n" not in text


def test_verify_with_a_state_db_is_the_db_check() -> None:
    assert entry_point("verify", ["--state", "job.db"]).__module__ == VERIFY_STATE
    assert entry_point("verify", ["--state=job.db"]).__module__ == VERIFY_STATE
    assert entry_point("verify", ["--prompts", "p", "--output", "o"]).__module__ == (
        COMMANDS["verify"][0])
    # With a prompt file the DB only lends the shards' checksums.
    assert entry_point("verify", ["--prompts", "p", "--output", "o", "--state", "j.db"]
                       ).__module__ == COMMANDS["verify"][0]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_answers_its_own_help(name: str) -> None:
    out = cli([name, "--help"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: dflash-supervisor {name}"), out.stdout[:200]


def test_the_top_level_help_lists_every_command_and_a_bad_one_is_refused() -> None:
    out = cli(["--help"])
    assert out.returncode == 0 and all(name in out.stdout for name in COMMANDS)
    out = cli(["launch"])
    assert out.returncode == 2 and "invalid choice: 'launch'" in out.stderr
