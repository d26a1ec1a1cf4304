"""The package's import graph: no cycle (imports inside functions included), and what a suite
declares (the knobs, the workloads' declarations, the suite file) imports no torch, so that
``benchbay validate``, ``list`` and ``show`` start in a second, not after torch's import."""

import ast
import subprocess
import sys

from tests.conftest import ROOT


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """The benchbay modules a module imports when it runs (anywhere in it, never under TYPE_CHECKING)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module in modules:
            named = {f"{node.module}.{a.name}" for a in node.names} & modules  # a submodule imported by name
            found.update(named or {node.module})
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {p: ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "benchbay").rglob("*.py")}
    files = {p: m.removesuffix(".__init__") for p, m in files.items()}
    modules = set(files.values())
    return {m: _imports(ast.parse(p.read_text()), modules) - {m} for p, m in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([v, *group]))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert graph["benchbay.workloads.base"] >= {"benchbay.knobs"}  # the model side imports the declarations
    assert cycles(graph) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # it finds one


def test_validate_list_and_show_import_no_torch():
    script = """
import contextlib, io, sys
from benchbay.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    codes = [main(["validate", "suites/quickstart.yaml"]), main(["list"]), main(["show", "dreamzero-5b"])]
print(codes, sorted(m for m in ("torch", "transformers", "diffusers") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["[0,", "0,", "0]", "[]"], out.stderr


def test_no_module_is_over_500_lines():
    """Issue 52: a module over 500 lines holds more than one concept; split it into modules of its package."""
    over = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "benchbay").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 500}
    assert over == {}, f"modules over 500 lines (split them): {over}"


#: the packages (and top-level modules) from the bottom up: a module imports only from its own
#: layer or below (the workloads are specs; the launch side runs them; analysis reads the store)
ORDER = ("record", "markdown", "parent_death", "interrupts", "knobs", "store", "document", "benchbay", "analysis",
         "collect", "decode", "workloads", "suite", "launch", "progress", "runner", "pytest_benchmark", "tune",
         "profiling", "report", "bisect", "baselines", "commands", "cli", "__main__")
#: the imports that climb back up, each lazy and said why: a loaded run's records become the
#: analysis's frame; the gate's calibration loads and runs its own suite
CLIMBS = {("benchbay.store", "benchbay.analysis.frame"), ("benchbay.analysis.gate_calibration", "benchbay.suite")}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "benchbay"


def test_the_packages_import_in_order():
    graph = import_graph()
    assert {_layer(m) for m in graph} == set(ORDER), "a new package or top-level module: place it in ORDER"
    rank = {name: i for i, name in enumerate(ORDER)}
    climbs = {(m, d) for m, deps in graph.items() for d in deps if rank[_layer(d)] > rank[_layer(m)]}
    assert climbs == CLIMBS and len(climbs) <= 2
