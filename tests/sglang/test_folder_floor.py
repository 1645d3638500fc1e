"""supervisor/sglang/ is a floor the daemon stands on: SGLang's protocol imports nothing of
the parts that use it (servers/, dispatch/, control/, job/ and the rest above), so a new
SGLang release is read and changed in that one folder. Read from the source's own imports."""

from __future__ import annotations

import ast
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[2] / "supervisor" / "sglang"
# What SGLang's protocol may stand on: the state records (request ids), the config.
ALLOWED = ("state.", "supervisor.config.", "supervisor.sglang.")
PROJECT = ("state", "supervisor", "tui")


def _project_imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [n for n in names if n.split(".")[0] in PROJECT]


def test_sglangs_folder_imports_only_what_lies_below_it() -> None:
    files = sorted(FOLDER.glob("*.py"))
    assert len(files) >= 8, files
    wrong = {f"{path.name}: {name}" for path in files for name in _project_imports(path)
             if not (name + ".").startswith(ALLOWED)}
    assert wrong == set()
