"""Every recipe in configs/ runs one short iteration on a tiny replica of its family's published
checkpoint, with reward stand-ins in the published formats, through its documented overlay
(``rewardloop smoke-overlay``): EXPO's DPO/SFT on SD1.5 (PNDM shipped) and SDXL (Euler shipped,
fp16 with a force_upcast VAE) here; Flow-GRPO, DiffusionNFT and AWM on SD3.5 with T5 (bf16) in
tests/workflow/test_recipe_smoke_sd3.py, the FLUX.1 recipes in tests/workflow/test_recipe_smoke_flux.py (the check:
tests/recipe_smoke.py).

Recipes are discovered, so one added later is covered without editing this file.
"""

from __future__ import annotations

import pytest

from recipe_smoke import OWN_FILES, RECIPES, assets, check_recipe_runs_one_iteration, parametrize_recipes, recipes_of  # noqa: F401

pytestmark = pytest.mark.workflow


def test_every_recipe_is_smoked():
    assert {p.stem for p in RECIPES} >= {"sd15_pickscore_dpo", "sd15_hps_dpo", "sd15_aesthetic_sft",
                                         "sdxl_pickscore_dpo", "sd35m_ocr_grpo", "sd35m_pickscore_nft"}
    # each recipe in exactly one of the smoke files
    split = [recipes_of(None), *(recipes_of(family) for family in OWN_FILES)]
    assert sorted(p for part in split for p in part) == RECIPES and all(split)


@parametrize_recipes(None)
def test_recipe_runs_one_iteration_on_its_replica(recipe, assets, tmp_path):  # noqa: F811
    check_recipe_runs_one_iteration(recipe, assets, tmp_path)
