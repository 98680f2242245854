"""The recipes under configs/ and their source comments (each one runs on a replica of its family:
tests/workflow/test_recipe_smoke.py)."""

from __future__ import annotations

import re

from workflow_helpers import ROOT

RECIPES = sorted((ROOT / "configs").glob("*.yaml"))


def test_there_are_recipes():
    names = {p.name for p in RECIPES}
    assert {"sd15_pickscore_dpo.yaml", "sdxl_pickscore_dpo.yaml", "sd15_hps_dpo.yaml", "sd15_aesthetic_sft.yaml"} <= names


def test_recipe_keys_carry_a_source_comment():
    """Each key line of an EXPO recipe says where its value comes from ([DD], [EXPO] or [here]).

    The SD3 recipes (issue 4) mark only the values taken from miles/flow_grpo ("miles: ...").
    """
    for recipe in (r for r in RECIPES if r.name.startswith(("sd15_", "sdxl_"))):
        for number, line in enumerate(recipe.read_text().splitlines(), 1):
            if re.match(r"^\s*[\w.]+:\s*\S", line) and not line.lstrip().startswith("#"):
                assert "#" in line or line.strip().endswith(":"), f"{recipe.name}:{number}: {line.strip()}"
