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


# The package's floors, bottom first: a module imports its own floor's and the floors below, never one above
# (README "The map of the house"). A new room goes on the floor of the highest room it imports, or above.
FLOORS = (
    ("base", {"rewardloop", "host", "lazy_torch", "mappings", "fingerprint", "results_layout", "row_record",
              "prompts", "shape_domain"}),
    ("files and sampling", {"artifacts", "sampling"}),
    ("models and rewards", {"models", "rewards", "benchmark_sets", "monitors"}),
    ("training", {"training", "signal"}),
    ("objectives", {"objectives"}),
    ("how jobs run", {"runtime"}),
    ("config", {"config", "experiments"}),
    ("stages", {"stages", "tracking", "smoke", "reports"}),
    ("command line", {"cli"}),
)


def room(module: str) -> str:
    """The top-level module or package of the package that ``module`` belongs to ("rewardloop" for its __init__)."""
    return module.split(".")[1] if "." in module else module


def floor_of(module: str) -> int:
    found = [level for level, (_, rooms) in enumerate(FLOORS) if room(module) in rooms]
    assert found, f"{module}: its room {room(module)!r} is on no floor of FLOORS (tests/unit/test_import_cycles.py)"
    return found[0]


def test_every_import_points_to_its_own_floor_or_one_below():
    up = sorted((module, target) for module, targets in graph().items() for target in targets
                if floor_of(target) > floor_of(module))
    assert not up, "imports that run up a floor:\n" + "\n".join(
        f"  {m} ({FLOORS[floor_of(m)][0]}) -> {t} ({FLOORS[floor_of(t)][0]})" for m, t in up)


def test_an_import_up_a_floor_is_found():
    assert floor_of("rewardloop.host.cpu_kernels") < floor_of("rewardloop.stages.generate")
    assert floor_of("rewardloop.runtime.warm") > floor_of("rewardloop.artifacts")


def test_the_readmes_map_of_the_house_names_every_module():
    """A newcomer finds a module from the README's map: every module of the package is named there (by its
    file's name, in the map's own words), so that a new one added without its line fails here."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    block = readme[readme.index("## Map of the house"):readme.index("\n## ", readme.index("## Map of the house") + 1)]
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", block))
    modules = sorted(p for p in (root / "src/rewardloop").rglob("*.py") if p.name != "__init__.py")
    assert len(modules) > 100
    missing = [str(p.relative_to(root)) for p in modules if p.stem not in named]
    assert not missing, "modules the README's map of the house does not name:\n  " + "\n  ".join(missing)
