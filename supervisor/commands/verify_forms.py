"""The two forms of `dflash-supervisor verify`, told apart by their arguments, and the usage
both print: whichever form's parser answers `--help`, the operator sees each form."""

from __future__ import annotations

from collections.abc import Sequence

# After argparse's "usage: ", one form a line.
FORMS = """dflash-supervisor verify --prompts FILE --output PREFIX [--state DB] [options]
       dflash-supervisor verify --state DB [--output PATH] [--read-back] [--integrity]"""
WHICH = ("The first form checks a whole (many-node) job's output against its prompt file, "
         "from the outside; the second one job's output against its state DB, and marks "
         "damaged shards to be rewritten at the next start.")


def _given(argv: Sequence[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in argv)


def is_state_form(argv: Sequence[str]) -> bool:
    """`--state` without `--prompts`: with a prompt file, a DB only lends its checksums."""
    return _given(argv, "--state") and not _given(argv, "--prompts")
