"""Import cycles of the package: the module import graph of python/tilelayout and passes/, from the source.

Every ``import`` / ``from ... import`` is read from the AST (nothing is imported) and resolved to a module of the
package: ``from .x import y`` is an edge to ``x`` (and to ``x.y`` when that is a module too), ``from . import y``
to the module ``y``. An import executed when its module is imported (top level, class bodies, ``try`` / ``if``
at top level) is a *module-level* edge; one inside a function body runs only when the function is called and is
a *function-level* edge; one under ``if TYPE_CHECKING:`` never runs (a *typing-only* edge, for annotations). A
cycle is a strongly connected component of more than one module.

    python maint/import_cycles.py    # module-level cycles; then counting function-level, then typing-only imports

``tests/test_import_cycles.py`` fails when any cycle appears, whatever kind of edge closes it: a cycle is broken
by moving the shared piece into its own module or by inverting the dependency.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: package name -> source folder (as pyproject.toml maps them)
PACKAGES = {"tilelayout": ROOT / "python" / "tilelayout", "tilelayout.passes": ROOT / "passes"}

__all__ = ["ImportGraph", "import_graph", "cycles", "report", "main"]


@dataclass
class ImportGraph:
    """Modules of the package and their import edges, split by when the import runs."""

    modules: dict = field(default_factory=dict)          # module name -> file
    module_level: dict = field(default_factory=dict)     # module -> set of modules imported at import time
    function_level: dict = field(default_factory=dict)   # module -> set of modules imported inside functions
    typing_only: dict = field(default_factory=dict)      # module -> set of modules imported for annotations only

    def edges(self, *kinds: str) -> dict:
        """{module: imported modules} over the named kinds of edge (``module_level``, ``function_level``,
        ``typing_only``)."""
        return {m: set().union(*(getattr(self, k)[m] for k in kinds)) for m in self.modules}


def _modules() -> dict:
    out = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package] + parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, known: dict):
        self.module, self.is_package, self.known = module, is_package, known
        self.depth = 0
        self.typing = False
        self.top: set = set()
        self.inner: set = set()
        self.annotations: set = set()

    def _add(self, name: str) -> None:
        while name and name not in self.known:
            name = name.rpartition(".")[0]              # ``tilelayout.x.y`` where y is a name in module x
        if name and name != self.module:
            (self.annotations if self.typing else self.inner if self.depth else self.top).add(name)

    def visit_FunctionDef(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef

    def visit_If(self, node):
        test = ast.unparse(node.test)
        if test in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            self.typing = True
            for stmt in node.body:
                self.visit(stmt)
            self.typing = False
            for stmt in node.orelse:
                self.visit(stmt)
            return
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node):
        base = _absolute(self.module, self.is_package, node.level, node.module)
        for alias in node.names:
            full = f"{base}.{alias.name}"
            self._add(full if full in self.known else base)


def import_graph() -> ImportGraph:
    """The package's import graph, read from the source files."""
    graph = ImportGraph(modules=_modules())
    for name, path in graph.modules.items():
        collector = _Collector(name, _is_package(path), graph.modules)
        collector.visit(ast.parse(path.read_text(), str(path)))
        graph.module_level[name] = collector.top
        graph.function_level[name] = collector.inner
        graph.typing_only[name] = collector.annotations
    return graph


def cycles(edges: dict) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted, sorted by first module."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def strongconnect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(edges):
            if v not in index:
                strongconnect(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(out)


def _short(name: str) -> str:
    for prefix in ("tilelayout.passes.", "tilelayout."):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def report(graph: ImportGraph) -> list[str]:
    """The cycles by kind of edge, as ``main`` prints them."""
    kinds = [("module-level", ("module_level",)),
             ("counting function-level imports too", ("module_level", "function_level")),
             ("counting typing-only imports too", ("module_level", "function_level", "typing_only"))]
    lines = [f"{len(graph.modules)} modules"]
    for label, names in kinds:
        found = cycles(graph.edges(*names))
        lines.append(f"{len(found)} import cycle(s), {label}:")
        lines += [f"  {len(comp)} modules: " + ", ".join(_short(m) for m in comp) for comp in found]
    return lines


def main(argv: list[str] | None = None) -> int:
    print("\n".join(report(import_graph())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
