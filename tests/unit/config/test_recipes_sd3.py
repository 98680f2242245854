"""The SD3.5 recipes are valid configs (schema; their data and model files live on the user's machine)."""

from __future__ import annotations

import pytest
import yaml

from rewardloop.config import check_objective, load_schema, refuse_moved_keys
from rewardloop.config.defaults import drop_null_rewards
from rewardloop.config.schema import Validator

from workflow_helpers import ROOT


@pytest.mark.parametrize("name, loss", [("sd35m_ocr_grpo", "grpo"), ("sd35m_pickscore_nft", "nft"),
                                        ("tiny_sd3_grpo", "grpo"), ("tiny_sd3_nft", "nft"), ("tiny_sd3_dgpo", "dgpo")])
def test_recipe_matches_the_schema(name, loss):
    config = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    drop_null_rewards(config)  # as config.validate does (the recipe drops config.yaml's color_match)
    refuse_moved_keys(config)
    errors = [f"{list(e.path)}: {e.message}" for e in Validator(load_schema()).iter_errors(config)]  # fills defaults
    assert errors == []
    assert config["model"]["family"] == "sd3" and config["train"]["loss"] == loss
    check_objective(config)  # the objective fits the family; GRPO's step strategy fits the steps


def test_ocr_recipe_keeps_the_miles_values():
    config = yaml.safe_load((ROOT / "configs/sd35m_ocr_grpo.yaml").read_text())
    gen, train = config["generate"], config["train"]
    assert (gen["steps"], config["eval"]["steps"], gen["guidance_scale"], gen["resolution"]) == (10, 40, 4.5, 512)
    assert (gen["images_per_prompt"], gen["prompts_per_iteration"]) == (16, 8)
    assert gen["sde"] == {"noise_level": 0.7, "strategy": "sde_window", "num_sde_steps": 10, "window_range": [0, 10]}
    assert (train["grpo"]["kl_beta"], train["grpo"]["clip_range"], train["learning_rate"]) == (0.04, 1e-4, 3e-4)
    assert (train["lora"]["rank"], train["lora"]["alpha"]) == (32, 64)
    assert config["advantages"]["globalize_reward_std"] is True and "ocr" in config["rewards"]


@pytest.mark.parametrize("family, loss, ok", [("sd3", "dpo", True), ("sdxl", "awm", False), ("sd15", "nft", False),
                                              ("sd15", "grpo", True), ("sd3", "nft", True)])
def test_loss_must_fit_the_family(family, loss, ok):
    from rewardloop.config import ConfigError, load

    overrides = {"model": {"family": family}, "train": {"loss": loss}}
    if ok:
        assert load(ROOT / "config.yaml", overrides)["train"]["loss"] == loss
    else:
        with pytest.raises(ConfigError, match=f"train.loss: {loss} is not available for model.family {family}"):
            load(ROOT / "config.yaml", overrides)


@pytest.mark.parametrize("overrides, key", [
    ({"train": {"adapter": "none"}}, "train.adapter"),
    ({"train": {"num_processes": 3}, "generate": {"prompts_per_iteration": 1, "images_per_prompt": 2}},
     "train.num_processes"),
])
def test_group_losses_refuse_what_they_do_not_support(overrides, key):
    """GRPO/NFT train a LoRA (the reference is the LoRA disabled); they split their samples over processes, so
    more processes than samples per iteration is refused (tests/workflow/test_multiprocess_training.py trains them in 2)."""
    from rewardloop.config import ConfigError, deep_merge, load

    with pytest.raises(ConfigError, match=key):
        load(ROOT / "config.yaml", deep_merge({"train": {"loss": "grpo"}}, overrides))


def test_sdxl_has_no_group_losses():
    from rewardloop.config import ConfigError, load

    with pytest.raises(ConfigError, match="train.loss: grpo is not available for model.family sdxl"):
        load(ROOT / "config.yaml", {"model": {"family": "sdxl"}, "train": {"loss": "grpo"}})
