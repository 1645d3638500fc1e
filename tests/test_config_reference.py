"""The configuration reference is written from sections.py and nowhere else: every key has its
text there, docs/configuration.md is what the generator writes now, and the README, docs/,
the folders' own READMEs and the example config name only keys that exist."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from supervisor.config import reference
from supervisor.config.sections import SECTIONS, key

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_CONFIG = REPO / "systemd" / "example-config.toml"

# `section.key` as prose writes it; not after a dot, slash or word (a module path, a file path).
_KEY_NAME = re.compile(r"(?<![\w./-])(" + "|".join(SECTIONS) + r")\.([a-z][a-z0-9_]*)(\*?)")
# File names that read like keys: job.db, job.toml, control.sock, backup.json, quality.py.
_FILE_SUFFIXES = {"db", "toml", "sock", "json", "jsonl", "log", "py", "md", "service", "yaml",
                  "lock", "txt"}
# The misspelt and misplaced keys the docs quote from the daemon's own refusals.
_QUOTED_REFUSALS = {"dispatch.max_atempts", "servers.prompts"}


def declared() -> dict[str, set[str]]:
    return {name: {f.name for f in fields(cls)} for name, cls in SECTIONS.items()}


def unknown_keys(text: str) -> set[str]:
    """The `section.key` names in a text that sections.py does not declare (`x_*`: a prefix)."""
    keys = declared()
    found = set()
    for match in _KEY_NAME.finditer(text):
        section, name, star = match.groups()
        if name in _FILE_SUFFIXES or f"{section}.{name}" in _QUOTED_REFUSALS:
            continue
        known = (any(k.startswith(name) for k in keys[section]) if star
                 else name in keys[section])
        if not known:
            found.add(f"{section}.{name}{star}")
    return found


def documents() -> list[Path]:
    """The README, docs/, the example config, and every folder's own README beside its code."""
    readmes = [p for top in ("supervisor", "state", "tui", "benchmarks", "tests")
               for p in sorted((REPO / top).rglob("README.md"))]
    return [REPO / "README.md", EXAMPLE_CONFIG, *sorted((REPO / "docs").glob("*.md")), *readmes]


def test_every_key_has_its_text():
    assert reference.undocumented_keys() == []


def test_a_key_declared_without_its_text_is_named():
    @dataclass(frozen=True)
    class Section:
        described: int = key(1, "a key with its text")
        bare: int = 2

    assert reference.undocumented_keys({"extra": Section}) == ["extra.bare"]


def test_the_reference_is_what_the_generator_writes():
    assert reference.REFERENCE.read_text(encoding="utf-8") == reference.render(), (
        "docs/configuration.md is out of date: run python -m supervisor.config.reference")
    check = subprocess.run([sys.executable, "-m", "supervisor.config.reference", "--check"],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_the_reference_lists_every_key_with_its_default():
    text = reference.render()
    rows = set(re.findall(r"^\| `([a-z0-9_]+\.[a-z0-9_]+)` \| ([^|]+) \|", text, re.M))
    assert {k for k, _ in rows} == {f"{s}.{k}" for s, ks in declared().items() for k in ks}
    assert ("dispatch.max_attempts", "`3`") in rows
    assert ("uploads.min_free_bytes", "1 GiB") in rows
    assert ("servers.command", '`["python", "-m", "sglang.launch_server"]`') in rows


def test_the_docs_name_only_keys_that_exist():
    for path in documents():
        assert path.exists(), path
        assert unknown_keys(path.read_text(encoding="utf-8")) == set(), path.relative_to(REPO)


def test_a_key_that_does_not_exist_is_caught():
    text = ("Set `dispatch.max_inflight` (job.db stays; see `dispatch.breaker_*`, "
            "supervisor.job.main_loop, `uploads.spool_dir`, [servers.flags]).")
    assert unknown_keys(text) == {"dispatch.max_inflight"}
    assert unknown_keys("`quality.window_*` and `control.sockets`") == {"quality.window_*",
                                                                        "control.sockets"}


def test_the_example_config_declares_only_keys_that_exist():
    config = tomllib.loads(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    keys = declared()
    assert set(config) <= set(keys), set(config) - set(keys)
    for section, table in config.items():
        assert set(table) <= keys[section], (section, set(table) - keys[section])
