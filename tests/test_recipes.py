"""Every recipe under configs/: valid over config.yaml, and its DAG builds (snakemake -n) on a tiny model.

Discovered generically, so recipes added later (other families) are covered; a family without a
tiny test model here is skipped with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rewardloop.config import deep_merge

from workflow_helpers import snakemake, write_overlay

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "configs").glob("*.yaml"))
TINY_MODELS = {"sd15": "tiny_model", "sdxl": "tiny_sdxl_model"}  # family -> fixture


def test_there_are_recipes():
    names = {p.name for p in RECIPES}
    assert {"sd15_pickscore_dpo.yaml", "sdxl_pickscore_dpo.yaml", "sd15_hps_dpo.yaml", "sd15_aesthetic_sft.yaml"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_dry_run_on_a_tiny_model(recipe, request, tmp_path):
    """config.yaml + the recipe + only the model swapped for a tiny one of the recipe's family."""
    config = yaml.safe_load(recipe.read_text())
    family = config.get("model", {}).get("family", "sd15")
    if family not in TINY_MODELS:
        pytest.skip(f"{recipe.name}: no tiny {family} model in this test suite yet")
    tiny = request.getfixturevalue(TINY_MODELS[family])
    for key in ("train", "eval"):  # the recipe's own prompt files, resolved from the repository root
        path = ROOT / config["prompts"][key]
        assert path.is_file(), f"{recipe.name}: prompts.{key} {path} missing"
        config["prompts"][key] = str(path)
    overlay = deep_merge(config, {"model": {"path": str(tiny), "build_tiny": False}})
    write_overlay(tmp_path, overlay)
    result = snakemake(tmp_path, "-n")
    planned = re.findall(r"^(?:local)?rule (\w+):", result.stdout + result.stderr, flags=re.M)
    iterations = config["iterations"]
    for stage in ("generate", "score", "pairs", "train", "export", "eval"):
        assert planned.count(stage) == iterations, (stage, planned)


def test_recipe_keys_carry_a_source_comment():
    """Each key line of a recipe says where its value comes from ([DD], [EXPO] or [here])."""
    for recipe in RECIPES:
        for number, line in enumerate(recipe.read_text().splitlines(), 1):
            if re.match(r"^\s*[\w.]+:\s*\S", line) and not line.lstrip().startswith("#"):
                assert "#" in line or line.strip().endswith(":"), f"{recipe.name}:{number}: {line.strip()}"
