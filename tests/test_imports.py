"""The layers of lib/normgrow import downward (README, "Module map"), counting every import, those inside functions
too (annotations under ``if TYPE_CHECKING`` excepted: they are never executed): no import cycle, and the folders
student < data < train < analysis < viz < the commands each import only the shared modules and the folders before
them. The shared modules import no folder, except config, the loader, which reads the parameter sections and the
allowed values that the components declare beside their code."""
from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "normgrow"
SHARED = {"paths", "schema", "utils", "kernel_manager", "ranks", "progress", "rundir", "identity", "config"}
FOLDERS = ["student", "data", "train", "analysis", "viz"]
CONFIG_READS = {"student.model", "student.growth_ops", "data.vocab", "train.distill", "train.optim", "train.tracking"}


def module_name(path: Path) -> str:
    parts = path.relative_to(LIB).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """{module: the modules of the package it imports}, names relative to normgrow ('' is the package itself)."""
    modules = {module_name(p): p for p in LIB.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(node)}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
                targets |= {stem} | {f"{stem}.{a.name}".lstrip(".") for a in node.names}
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                targets |= {n.removeprefix("normgrow").lstrip(".") for n in names if n.split(".")[0] == "normgrow"}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def layer(name: str) -> int:
    """0 shared, 1.. the folders in order, len(FOLDERS) + 1 the commands (and the package itself)."""
    first = name.split(".")[0]
    if first in FOLDERS:
        return FOLDERS.index(first) + 1
    return 0 if name in SHARED else len(FOLDERS) + 1


def test_no_import_cycle():
    graph, state, cycles = import_graph(), {}, []

    def visit(node, path):
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"
    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_folders_import_downward():
    upward = [f"{m} -> {t}" for m, targets in import_graph().items() for t in sorted(targets)
              if layer(t) > layer(m) and t != "" and not (m == "config" and t in CONFIG_READS)]
    assert not upward, "imports against the layers: " + "; ".join(upward)
    shared_into_folders = [f"{m} -> {t}" for m, targets in import_graph().items() if layer(m) == 0 and m != "config"
                           for t in sorted(targets) if layer(t) > 0]
    assert not shared_into_folders, shared_into_folders


def test_the_graph_sees_imports_inside_functions():
    """The checks above would pass vacuously on a parser that missed imports: these edges are known."""
    graph = import_graph()
    assert "train.step" in graph["bench"]  # a top-level relative import
    assert "data.teacher_cache" in graph["analysis.regime"]  # inside run_verdict
    assert "config" not in graph["data.corpus"]  # only under TYPE_CHECKING
