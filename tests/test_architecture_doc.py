"""docs/architecture.md's source tree is the tree as it is: every module under passes/ and python/tilelayout/ is
listed at its place (folder by folder, read from the indentation), and nothing listed there is missing. And a
module of the package over 600 lines says at its top why it is one module."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("python/tilelayout", "passes")


def _tree_block(text: str) -> list[str]:
    """The indented lines of the code block under ``## Source tree``."""
    section = text.split("## Source tree", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("    ") and line.strip()]


def documented_modules(text: str) -> set[str]:
    """Paths of the modules the tree lists: a name ending in ``/`` opens a folder for the lines indented under
    it, a name ending in ``.py`` is a module there, any other line is a heading (it groups, adds no folder)."""
    out: set[str] = set()
    stack: list[tuple[int, str | None]] = []          # (indent, folder or None for a heading)
    for line in _tree_block(text):
        indent = len(line) - len(line.lstrip())
        name = line.split()[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        folders = [f for _, f in stack if f]
        if name.endswith(".py"):
            out.add("/".join(folders + [name]))
        elif name.endswith("/") and re.fullmatch(r"[\w./]+/", name):
            stack.append((indent, name.rstrip("/")))
        else:
            stack.append((indent, None))
    return out


def source_modules() -> set[str]:
    return {str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def test_every_module_is_in_the_architecture_doc_at_its_place():
    documented = documented_modules(DOC.read_text())
    missing = sorted(source_modules() - documented)
    assert not missing, f"modules not in docs/architecture.md's source tree (add each with its job): {missing}"


def test_the_architecture_doc_lists_no_module_that_is_gone():
    documented = {m for m in documented_modules(DOC.read_text()) if m.startswith(PACKAGES)}
    stale = sorted(documented - source_modules())
    assert not stale, f"docs/architecture.md lists modules that do not exist: {stale}"


def test_the_tree_reader_follows_folders_and_skips_headings():
    text = ("## Source tree\n\n    passes/          the passes\n      shared\n        a.py       job\n"
            "      sub/\n        b.py         job\n      c.py         job\n    other/\n      d.py\n\n## Next\n")
    assert documented_modules(text) == {"passes/a.py", "passes/sub/b.py", "passes/c.py", "other/d.py"}


#: a module longer than this says at its top why it is one module (a paragraph of its docstring starting "Size")
MAX_LINES = 600


def test_every_long_module_says_at_its_top_why_it_is_one_module():
    unexplained = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            text = path.read_text()
            if text.count("\n") <= MAX_LINES:
                continue
            doc = ast.get_docstring(ast.parse(text)) or ""
            if not any(p.lstrip().startswith("Size") for p in doc.split("\n\n")):
                unexplained.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not unexplained, f"split these by job, or say in their docstring why each is one module: {unexplained}"


def test_lowering_takes_from_inference_only_through_its_boundary_module():
    """``passes/lowering/from_inference.py`` is the one door: every name lowering takes from inference's code is
    listed (and explained) there, and it imports no inference rule."""
    import sys
    sys.path.insert(0, str(ROOT / "maint"))
    import import_cycles
    graph = import_cycles.import_graph()
    edges = graph.edges("module_level", "function_level", "typing_only")
    door = "tilelayout.passes.lowering.from_inference"
    crossing = sorted(f"{m} -> {t}" for m, ts in edges.items() if m.startswith("tilelayout.passes.lowering.")
                      and m != door for t in ts if t.startswith("tilelayout.passes.inference"))
    assert not crossing, f"lowering modules importing inference directly (go through from_inference.py): {crossing}"
    rules = {"op_rules", "fragment_rules", "reduce_layouts", "loop_plan"}
    assert not {t.rsplit(".", 1)[-1] for t in edges[door]} & rules
