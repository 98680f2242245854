"""The recipe smoke (tests/recipe_smoke.py) of Qwen-Image: its recipe, and every other objective one iteration on
the same published-layout replica."""

from __future__ import annotations

import pytest
import yaml

from recipe_smoke import assets, check_recipe_runs_one_iteration, parametrize_recipes  # noqa: F401
from rewardloop.models.families import get_family
from rewardloop.objectives import OBJECTIVES, get_objective
from rewardloop.smoke.overlay import TIE_BREAKER

from workflow_helpers import ROOT

pytestmark = pytest.mark.workflow


@parametrize_recipes("qwen_image")
def test_recipe_runs_one_iteration_on_its_replica(recipe, assets, tmp_path):  # noqa: F811
    check_recipe_runs_one_iteration(recipe, assets, tmp_path)


OTHER_OBJECTIVES = [name for name in OBJECTIVES if name != "grpo" and get_objective(name).supports(get_family("qwen_image"))]


@pytest.mark.parametrize("loss", OTHER_OBJECTIVES)
def test_every_objective_runs_one_iteration_on_the_replica(loss, assets, tmp_path):  # noqa: F811
    """Each objective's tiny recipe (the tiny SD3's, another classifier-free-guidance family; the tiny FLUX's where
    the SD3 has none) with its model swapped for Qwen-Image: the objective's own settings, on this family."""
    recipe = next(path for path in (ROOT / f"configs/tiny_sd3_{loss}.yaml", ROOT / f"configs/tiny_flux_{loss}.yaml")
                  if path.is_file())
    config = yaml.safe_load(recipe.read_text())
    config.pop("tiny", None)
    config["model"] = {"family": "qwen_image", "path": "Qwen/Qwen-Image", "build_tiny": False}
    # color_match scores the random replica's grey images 0 (measured: at most 3e-11): every group would tie
    config["rewards"] = {**config["rewards"], **TIE_BREAKER}
    variant = tmp_path / f"qwen_image_{loss}.yaml"
    variant.write_text(yaml.safe_dump(config, sort_keys=False))
    check_recipe_runs_one_iteration(variant, assets, tmp_path)
