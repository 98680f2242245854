"""The recipe smoke (tests/recipe_smoke.py) of the flux family's recipes: FLUX.1 (dev and schnell, the tiny FLUX's
every objective), and the group objectives that have no schnell recipe of their own on the schnell replica."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from recipe_smoke import assets, check_recipe_runs_one_iteration, parametrize_recipes  # noqa: F401
from rewardloop.models.replicas import variant_of

from workflow_helpers import ROOT

pytestmark = pytest.mark.workflow

SCHNELL = "black-forest-labs/FLUX.1-schnell"


@parametrize_recipes("flux")
def test_recipe_runs_one_iteration_on_its_replica(recipe, assets, tmp_path):  # noqa: F811
    check_recipe_runs_one_iteration(recipe, assets, tmp_path)


@pytest.mark.parametrize("loss", ["dgpo", "mixgrpo"])
def test_group_objectives_run_one_iteration_on_the_schnell_replica(loss, assets, tmp_path):  # noqa: F811
    """DGPO's and MixGRPO's tiny FLUX recipes with the model swapped for FLUX.1-schnell's replica (no guidance
    embedding: the rollouts and the eval at scale 1, as configs/flux_schnell_pickscore_grpo.yaml)."""
    config = yaml.safe_load((ROOT / f"configs/tiny_flux_{loss}.yaml").read_text())
    config.pop("tiny", None)
    config["model"] = {"family": "flux", "path": SCHNELL, "build_tiny": False}
    config["generate"]["guidance_scale"] = config["eval"]["guidance_scale"] = 1.0
    assert variant_of("flux", SCHNELL) == "schnell"  # the overlay builds the schnell replica for it
    variant = tmp_path / f"flux_schnell_{loss}.yaml"
    variant.write_text(yaml.safe_dump(config, sort_keys=False))
    check_recipe_runs_one_iteration(variant, assets, tmp_path)
    replica = Path(yaml.safe_load((tmp_path / "smoke/overlay.yaml").read_text())["model"]["path"])
    assert json.loads((replica / "transformer/config.json").read_text())["guidance_embeds"] is False
