"""Every recipe under configs/: valid over config.yaml, and its DAG builds (snakemake -n) on a tiny model.

Discovered generically, so recipes added later (other families) are covered; a family without a
tiny test model here is skipped with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rewardloop.objectives import get_objective
from rewardloop.config import deep_merge
from rewardloop.rewards.base import path_options

from workflow_helpers import snakemake, write_overlay

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "configs").glob("*.yaml"))
TINY_MODELS = {"sd15": "tiny_model", "sdxl": "tiny_sdxl_model", "sd3": "tiny_sd3_model"}  # family -> fixture


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
    # the recipe's own prompt files (else config.yaml's), resolved from the repository root
    default_prompts = yaml.safe_load((ROOT / "config.yaml").read_text())["prompts"]
    config["prompts"] = {**default_prompts, **config.get("prompts", {})}
    for key in ("train", "eval"):
        path = ROOT / config["prompts"][key]
        if Path(config["prompts"][key]).is_absolute() and not path.is_file():
            # The user's data (e.g. /data/... in the SD3.5 recipes): stand-ins with quoted targets (ocr)
            path = tmp_path / f"{key}.txt"
            path.write_text("".join(f'a poster with the text "word {key} {i}"\n' for i in range(16)))
        assert path.is_file(), f"{recipe.name}: prompts.{key} {path} missing"
        config["prompts"][key] = str(path)
    for name, options in config.get("rewards", {}).items():
        # the user's reward weights (/models/...): empty stand-ins, as a dry run loads none of them
        for option, (kind, _) in path_options(name).items():
            if isinstance(options, dict) and option in options and not Path(options[option]).exists():
                options[option] = str(tmp_path / option)
                (tmp_path / option).mkdir() if kind == "dir" else (tmp_path / option).touch()
    overlay = deep_merge(config, {"model": {"path": str(tiny), "build_tiny": False}})
    write_overlay(tmp_path, overlay)
    result = snakemake(tmp_path, "-n")
    planned = re.findall(r"^(?:local)?rule (\w+):", result.stdout + result.stderr, flags=re.M)
    iterations = config["iterations"]
    signal = get_objective(config["train"]["loss"]).signal
    for stage in ("generate", "score", signal, "train", "export", "eval"):
        assert planned.count(stage) == iterations, (stage, planned)


def test_recipe_keys_carry_a_source_comment():
    """Each key line of an EXPO recipe says where its value comes from ([DD], [EXPO] or [here]).

    The SD3 recipes (issue 4) mark only the values taken from miles/flow_grpo ("miles: ...").
    """
    for recipe in (r for r in RECIPES if r.name.startswith(("sd15_", "sdxl_"))):
        for number, line in enumerate(recipe.read_text().splitlines(), 1):
            if re.match(r"^\s*[\w.]+:\s*\S", line) and not line.lstrip().startswith("#"):
                assert "#" in line or line.strip().endswith(":"), f"{recipe.name}:{number}: {line.strip()}"
