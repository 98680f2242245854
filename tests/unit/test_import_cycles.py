"""No import cycle between the modules of the rewardloop package (its import graph: tests/import_graph.py,
which says what counts as an import)."""

from __future__ import annotations

from import_graph import cycles, graph, imported


def test_imports_inside_functions_and_relative_ones_count_type_checking_ones_do_not(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text("from typing import TYPE_CHECKING\nfrom . import sibling\nfrom ..other import thing\n"
                    "if TYPE_CHECKING:\n    import p.typed\n"
                    "def f():\n    from p.sub.deep import name\n    import p.sub.mod\n")
    known = {"p", "p.sub", "p.sub.mod", "p.sub.sibling", "p.other", "p.typed", "p.sub.deep"}
    assert imported("p.sub.mod", path, known) == {"p.sub.sibling", "p.other", "p.sub.deep"}


def test_the_package_graph_has_its_modules_and_packages():
    edges = graph()
    assert len(edges) > 100 and "rewardloop.objectives" in edges
    assert "rewardloop.objectives.registry" in edges["rewardloop.objectives"]  # `from pkg.mod import name`
    assert "rewardloop.objectives.awm" in edges["rewardloop.objectives"]  # `from pkg import module`
    assert "rewardloop.artifacts" in edges["rewardloop.reports.summary"]


def test_cycles_are_found_and_named():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert cycles(edges) == [["a", "b", "c", "a"], ["e", "e2", "e"]]


def test_no_import_cycle_between_the_package_modules():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join("  " + " -> ".join(cycle) for cycle in found)
