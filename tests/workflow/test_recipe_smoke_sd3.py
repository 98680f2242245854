"""The recipe smoke (tests/recipe_smoke.py) of the sd3 family's recipes: SD3.5 (Flow-GRPO, DiffusionNFT, AWM, DPO on SD3.5-M/L and the tiny SD3; T5 in bf16)."""

from __future__ import annotations

import pytest

from recipe_smoke import assets, check_recipe_runs_one_iteration, parametrize_recipes  # noqa: F401

pytestmark = pytest.mark.workflow


@parametrize_recipes("sd3")
def test_recipe_runs_one_iteration_on_its_replica(recipe, assets, tmp_path):  # noqa: F811
    check_recipe_runs_one_iteration(recipe, assets, tmp_path)
