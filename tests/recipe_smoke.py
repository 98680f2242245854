"""The recipe smoke (tests/workflow/test_recipe_smoke*.py): every recipe in configs/ runs one short iteration on a
tiny replica of its family's published checkpoint, with reward stand-ins in the published formats,
through its documented overlay (``rewardloop smoke-overlay``).

The recipes are split over files by family (so that the two xdist workers share them; each file builds
only its families' replicas); recipes are discovered, so one added later is covered without editing a
test: a family not named in ``OWN_FILES`` is smoked in tests/workflow/test_recipe_smoke.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rewardloop.artifacts import read_table, read_tensors
from rewardloop.models.families import get_family
from rewardloop.models.loading import LORA_WEIGHTS
from rewardloop.objectives import get_objective
from rewardloop.smoke.overlay import recipe_config, write_overlay

from workflow_helpers import ROOT, snakemake

# A fan-out of recipes (experiments:, configs/tiny_sd3_compare.yaml) is not smoked as one: its variants'
# options are their own recipes' (smoked here), and tests/workflow/test_experiments.py plans it.
RECIPES = sorted(p for p in (ROOT / "configs").glob("*.yaml") if "experiments" not in recipe_config(p))
OWN_FILES = ("sd3", "flux", "qwen_image")  # families smoked in a file of their own: tests/workflow/test_recipe_smoke_<family>.py


# One iteration of the workflow in 2 training processes (accelerate launch, gloo) for each objective, on its tiny
# recipe (grpo: tests/workflow/test_workflow_sd3.py's run): the job's launch, not only the stage's.
TWO_PROCESSES = {"tiny_sd3_dpo", "tiny_sd3_nft", "tiny_sd3_awm", "tiny_flux_sft"}


def family_of(recipe: Path) -> str:
    return recipe_config(recipe)["model"]["family"]


def recipes_of(family: str | None) -> list[Path]:
    """The recipes of ``family``; None: those of every family without a file of its own."""
    return [p for p in RECIPES if (family_of(p) == family if family else family_of(p) not in OWN_FILES)]


def parametrize_recipes(family: str | None):
    recipes = recipes_of(family)
    return pytest.mark.parametrize("recipe", recipes, ids=[p.stem for p in recipes])


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    """Replicas and reward stand-ins, built once per file and shared by its recipes' overlays."""
    return tmp_path_factory.mktemp("smoke-assets")


def check_recipe_runs_one_iteration(recipe: Path, assets: Path, tmp_path: Path) -> None:
    config = recipe_config(recipe)
    family, objective = get_family(config["model"]["family"]), get_objective(config["train"]["loss"])
    overlay = write_overlay(recipe, tmp_path / "smoke", assets=assets)
    processes = 2 if recipe.stem in TWO_PROCESSES else 1
    if processes > 1:
        settings = yaml.safe_load(overlay.read_text())
        settings.setdefault("train", {})["num_processes"] = processes
        overlay.write_text(yaml.safe_dump(settings))
    work = tmp_path / "run"
    work.mkdir()
    shutil.copyfile(recipe, work / "test.yaml")  # the recipe first, the overlay over it: --configfile recipe overlay
    snakemake(work, overlays=(overlay,))

    it = work / "results/iter_000"
    samples = read_table(it / "samples.parquet").to_pandas()
    expected = (("flow_sde" if objective.records_steps else "flow_euler") if family.flow_matching
                else ("ddim_recorded" if objective.records_steps else "ddim"))
    assert set(samples.sampler) == {expected}  # DDIM whatever the replica ships (PNDM, Euler)
    for table in ("scores", "eval"):
        rewards = read_table(it / f"{table}.parquet").to_pandas()["reward"].to_numpy()
        assert len(rewards) and np.isfinite(rewards).all(), table
    assert (it / f"{objective.signal}.parquet").is_file()
    assert json.loads((it / "metrics/train.json").read_text())["processes"] == processes
    tensors = read_tensors(it / "latents.safetensors")
    embeds = tensors[f"prompt_embeds/{samples.prompt_id[0]}"]
    assert embeds.dtype == torch.float32
    # SD3.5: CLIP's 77 tokens then T5's 256, as its pipeline encodes; FLUX.1: T5's 512 alone (CLIP gives the
    # pooled embedding only); Qwen-Image: the longest prompt's tokens after the template's (the mask says which);
    # the UNets: CLIP's 77
    if family.name == "qwen_image":
        mask = tensors[f"prompt_embeds_mask/{samples.prompt_id[0]}"]
        assert embeds.shape[0] == mask.shape[0] and mask.max() == 1
    else:
        assert embeds.shape[0] == {"sd3": 77 + 256, "flux": 512}.get(family.name, 77)

    # model(0) loads where a user would use it: the family's plain diffusers pipeline
    settings = yaml.safe_load(overlay.read_text())
    replica = settings["model"]["path"]
    cls = family.pipeline_class()
    kwargs = dict(prompt=samples.prompt[0], height=64, width=64, num_inference_steps=2,
                  output_type="np", guidance_scale=1.0)
    if (it / "checkpoint" / LORA_WEIGHTS).is_file():
        pipe = cls.from_pretrained(replica, dtype=torch.float32, **family.load_kwargs())
        pipe.set_progress_bar_config(disable=True)
        before = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
        pipe.load_lora_weights(str(it / "checkpoint"))
        after = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
        assert np.isfinite(after).all() and not np.array_equal(before, after)
    else:  # train.adapter none: model(0) is a complete pipeline folder
        pipe = cls.from_pretrained(str(it / "checkpoint"), dtype=torch.float32)
        pipe.set_progress_bar_config(disable=True)
        assert np.isfinite(pipe(generator=torch.Generator().manual_seed(0), **kwargs).images).all()
