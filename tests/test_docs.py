"""The repository's documents stand alone: every figure and relative link of README and docs/ names a file of the
repository, and nothing cites a path outside it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_and_figure_names_a_file_of_the_repository(doc):
    targets = [t.split("#")[0] for t in LINK.findall(doc.read_text()) if not re.match(r"[a-z]+:", t)]
    missing = [t for t in targets if t and not (doc.parent / t).exists()]
    assert not missing, f"{doc.name} links to files that do not exist: {missing}"


def test_readme_shows_the_answer_with_a_committed_figure():
    figures = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert figures, "README shows no figure"
    assert all((ROOT / f).is_file() and (ROOT / f).stat().st_size > 1000 for f in figures), figures


def test_nothing_cites_a_path_outside_the_repository():
    files = [p for d in ("lib", "tests", "notebooks", "params", "docs", "scripts") for p in (ROOT / d).rglob("*")
             if p.is_file() and p.suffix in (".py", ".md", ".yaml", ".ipynb", ".txt")] + [ROOT / "README.md",
                                                                                      ROOT / "Makefile"]
    outside = re.compile(r"\.\./shared|/work/")
    cited = [str(p.relative_to(ROOT)) for p in files if p != Path(__file__).resolve() and outside.search(p.read_text())]
    assert not cited, f"paths outside the repository cited in: {cited}"


def test_readme_names_the_current_numerics_version():
    """README's glossary says which numerics version runs record now; it said 5 for a while after version 6."""
    from normgrow.rundir import NUMERICS_VERSION
    said = re.findall(r"`rundir\.NUMERICS_VERSION`, now (\d+)", (ROOT / "README.md").read_text())
    assert said == [str(NUMERICS_VERSION)], f"README says numerics version {said}, the code records {NUMERICS_VERSION}"


NAMED_BY = [ROOT / "README.md", ROOT / "docs" / "DESIGN.md", ROOT / "requirements.txt", ROOT / "Makefile"]
MODULE = re.compile(r"(?<![\w.])normgrow(?:\.[a-z_]\w*)+")
SOURCE = re.compile(r"(?<![\w/:.])((?:lib/)?(?:normgrow/)?(?:train|student|data|analysis|viz|tests)/\w+\.py"
                    r"|(?:lib/)?normgrow/\w+\.py)")


def _resolves(dotted: str) -> bool:
    """A module of lib/normgrow, or an attribute of one (normgrow.analysis.stats.tost)."""
    import importlib
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


@pytest.mark.parametrize("doc", NAMED_BY, ids=lambda p: p.name)
def test_every_module_and_source_file_named_exists(doc):
    """README, DESIGN, requirements.txt and the Makefile name modules (normgrow.x.y) and source files
    (train/step.py, tests/test_x.py) that exist; a path after `git show <commit>:` is history and not checked."""
    text = doc.read_text()
    modules = sorted({m for m in MODULE.findall(text) if not _resolves(m)})
    assert not modules, f"{doc.name} names modules or attributes that do not exist: {modules}"
    files = sorted({f for f in SOURCE.findall(text) if not any(
        (base / f.removeprefix("lib/")).is_file() for base in (ROOT, ROOT / "lib", ROOT / "lib" / "normgrow"))})
    assert not files, f"{doc.name} names source files that do not exist: {files}"
