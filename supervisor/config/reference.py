"""The configuration reference, docs/configuration.md, written from sections.py: every key's
default and text come from its declaration there, so the reference cannot drift from the
code. `python -m supervisor.config.reference` rewrites the file; `--check` only says whether
it is current (exit 1 when not)."""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Mapping
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

from supervisor.config.sections import SECTIONS

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "configuration.md"

_INTRO = """\
# Configuration reference

<!-- Written by `python -m supervisor.config.reference` from supervisor/config/sections.py;
     edit the keys' text there, not here (tests/test_config_reference.py holds the two equal). -->

The job's config is one TOML file; [systemd/example-config.toml](../systemd/example-config.toml)
is a commented example. Every key is optional except `servers.model_path`, one of
`servers.gpus` / `servers.count`, and, with thinking on (the default),
`servers.flags.reasoning-parser`. Relative paths are relative to the config file's directory
(state, spool, logs and socket: to DIR with `run --workdir DIR`). An unknown key, a key
under the wrong table and a value that cannot work stop the daemon at start with one line
naming the key: [checks.md](checks.md) lists what is refused and warned. What a reload
(SIGHUP) applies at once and what needs a restart: [systemd.md](systemd.md).
"""

# A repository path ending in .md becomes a link, relative to docs/.
_MD_PATH = re.compile(r"(?<![\w./\[-])(?<!\]\()([\w/-]+(?:\.[\w-]+)*\.md)\b")


def undocumented_keys(sections: Mapping[str, type] = SECTIONS) -> list[str]:
    """Every `section.key` declared without its text (the rule in sections.py's docstring)."""
    return [f"{name}.{f.name}" for name, cls in sections.items() for f in fields(cls)
            if not str(f.metadata.get("doc", "")).strip()]


def _default_text(f: Field[Any]) -> str:
    shown = f.metadata.get("shown")
    if shown:
        return str(shown)
    value = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    return "none" if value is None else f"`{_toml(value)}`"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}" if value != int(value) else f"{int(value)}"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def _link(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        path = match.group(1)
        target = path[len("docs/"):] if path.startswith("docs/") else f"../{path}"
        return f"[{path}]({target})"
    return _MD_PATH.sub(one, text)


def render() -> str:
    """The whole reference, as the file should read."""
    missing = undocumented_keys()
    if missing:
        raise SystemExit(f"keys without their text in sections.py: {', '.join(missing)}")
    parts = [_INTRO]
    for name, cls in SECTIONS.items():
        about = inspect.getdoc(cls) or ""
        parts.append(f"\n## [{name}]\n\n{_link(' '.join(about.split()))}\n\n"
                     "| key | default | meaning |\n|---|---|---|\n")
        for f in fields(cls):
            doc = _link(" ".join(str(f.metadata["doc"]).split())).replace("|", "\\|")
            parts.append(f"| `{name}.{f.name}` | {_default_text(f)} | {doc} |\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m supervisor.config.reference",
                                     description=__doc__)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/configuration.md is not what would be written")
    args = parser.parse_args(argv)
    text = render()
    current = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    if args.check:
        if current != text:
            print(f"{REFERENCE}: out of date: run python -m supervisor.config.reference",
                  file=sys.stderr)
            return 1
        return 0
    if current != text:
        REFERENCE.parent.mkdir(parents=True, exist_ok=True)
        REFERENCE.write_text(text, encoding="utf-8")
        print(f"wrote {REFERENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
