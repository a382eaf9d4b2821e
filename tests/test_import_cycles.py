"""No import cycle at any level (maint/import_cycles.py): module-level, function-level or typing-only imports.

``KNOWN`` is empty and stays so: a cycle is broken by moving the shared piece into its own module or by
inverting the dependency, not by listing it here."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "maint"))

import import_cycles  # noqa: E402

#: cycles through function-level or typing-only imports, as module sets (short names, see ``_short``): none
KNOWN: list[set] = []


def _short_sets(found) -> list[set]:
    return [{import_cycles._short(m) for m in comp} for comp in found]


def test_no_module_level_import_cycle():
    graph = import_cycles.import_graph()
    assert import_cycles.cycles(graph.edges("module_level")) == []


def test_no_import_cycle_beyond_the_known_ones_and_the_list_only_shrinks():
    graph = import_cycles.import_graph()
    found = _short_sets(import_cycles.cycles(graph.edges("module_level", "function_level", "typing_only")))
    new = [c for c in found if c not in KNOWN]
    gone = [c for c in KNOWN if c not in found]
    assert not new, f"new import cycle(s): {new}; break them (move the shared function to the module that owns it)"
    assert not gone, f"cycle(s) broken or changed: {gone}; update KNOWN in this test to what remains"


def test_the_graph_reader_sees_each_kind_of_import(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n"
                              "try:\n    from pkg.b import f\nexcept ImportError:\n    pass\n")
    monkeypatch.setattr(import_cycles, "PACKAGES", {"pkg": pkg})
    graph = import_cycles.import_graph()
    assert graph.module_level == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": set(), "pkg.c": {"pkg.b"}}
    assert graph.function_level["pkg.b"] == {"pkg.c"} and graph.typing_only["pkg.c"] == {"pkg.a"}
    assert import_cycles.cycles(graph.edges("module_level")) == []
    assert import_cycles.cycles(graph.edges("module_level", "function_level")) == [["pkg.b", "pkg.c"]]
    assert import_cycles.cycles(graph.edges("module_level", "function_level", "typing_only")) == \
        [["pkg.a", "pkg.b", "pkg.c"]]
