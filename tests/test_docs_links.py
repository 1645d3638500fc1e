"""The README and docs/ link only to files that exist, and to headings those pages have: a
page moved or a heading renamed breaks a newcomer's walk through the docs."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's ids for a page's headings: lower case, punctuation dropped, spaces to dashes."""
    heads = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(target)
    return broken


def test_the_docs_links_lead_somewhere():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    assert len(pages) > 10
    for page in pages:
        assert broken_links(page) == [], page.relative_to(REPO)


def test_a_broken_link_is_caught(tmp_path):
    (tmp_path / "a.md").write_text("# One (`x@.y`)\n\n[ok](#one-xy) [gone](b.md) "
                                   "[no heading](a.md#two) [web](https://example.org)\n")
    assert broken_links(tmp_path / "a.md") == ["b.md", "a.md#two"]
