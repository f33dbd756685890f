"""The docs index (docs/README.md: the documents, the roles, the layout) is generated from the tree by
scripts/docs_index.py, as the phase table of README.md is by scripts/role_docs.py, and fails here when it drifts; the
links between the documents land on a file and a heading that exist."""

from __future__ import annotations

import difflib
import importlib.util
import re
from pathlib import Path

import pytest
from conftest import ROOT

REGENERATE = "scripts/docs_index.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("docs_index", ROOT / "scripts" / "docs_index.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docs_index = _load_script()


def test_the_docs_index_matches_the_tree():
    try:
        wanted = docs_index.render()
    except docs_index.LayoutError as error:
        pytest.fail(f"{error}\nthen run {REGENERATE}")
    found = docs_index.INDEX.read_text()
    diff = "".join(
        difflib.unified_diff(
            found.splitlines(keepends=True), wanted.splitlines(keepends=True), "docs/README.md", "generated"
        )
    )
    assert found == wanted, f"docs/README.md is out of date: run {REGENERATE}\n{diff}"


def test_a_new_entry_without_a_line_in_layout_yml_is_named(monkeypatch):
    tree = docs_index.tree_entries(["inventories", "molecule", "tests"])
    monkeypatch.setattr(docs_index, "tree_entries", lambda expand: {**tree, "newdir": True, "tests/newsuite": True})
    with pytest.raises(docs_index.LayoutError) as error:
        docs_index.layout_section()
    assert "newdir: no line in docs/layout.yml" in str(error.value)
    assert "tests/newsuite: no line in docs/layout.yml" in str(error.value)


def test_a_line_in_layout_yml_for_a_path_that_is_gone_is_named(monkeypatch):
    tree = docs_index.tree_entries(["inventories", "molecule", "tests"])
    del tree["templates"]
    monkeypatch.setattr(docs_index, "tree_entries", lambda expand: tree)
    with pytest.raises(docs_index.LayoutError) as error:
        docs_index.layout_section()
    assert "templates: in docs/layout.yml but not in the tree" in str(error.value)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            slug = _slug(match.group(1))
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("roles/*/README.md"))]


def test_every_link_between_the_documents_lands():
    """Markdown links ([text](path#anchor)) of README.md, docs/ and the roles' READMEs, and the citations
    `docs/<file>.md#<anchor>` of README.md and docs/: the file exists, and so does the heading."""
    broken = []
    for doc in _documents():
        text = doc.read_text()
        targets = [(doc.parent, m) for m in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", m)]
        if doc.parent == ROOT / "docs" or doc == ROOT / "README.md":
            targets += [(ROOT, m) for m in re.findall(r"(?<![\w/.-])(docs/[\w.-]+\.md#[\w-]+)", text)]
        for base, target in targets:
            path, _, anchor = target.partition("#")
            file = (base / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []
