"""The recipe smoke (tests/recipe_smoke.py) of the flux family's recipes: FLUX.1 (dev and schnell, the tiny FLUX's every objective)."""

from __future__ import annotations

import pytest

from recipe_smoke import assets, check_recipe_runs_one_iteration, parametrize_recipes  # noqa: F401

pytestmark = pytest.mark.workflow


@parametrize_recipes("flux")
def test_recipe_runs_one_iteration_on_its_replica(recipe, assets, tmp_path):  # noqa: F811
    check_recipe_runs_one_iteration(recipe, assets, tmp_path)
