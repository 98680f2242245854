"""The objective registry is the one place an objective is declared: the schema, the choices of
train.loss, the startup checks, the DAG's signal and the Trainer all read it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import pandas as pd
import pytest
import torch

from rewardloop import config as cfgmod
from rewardloop.objectives import OBJECTIVES, get_objective, objective
from rewardloop.objectives.options import option, section_schema
from rewardloop.objectives.preference import PairObjective
from rewardloop.objectives.registry import ModelInfo
from rewardloop.models import loading as models
from rewardloop.models.families import get_family
from rewardloop.training.trainer import Trainer

from training_inputs import synthetic_pairs
from workflow_helpers import ROOT

PROMPTS = {k: str(ROOT / f"resources/prompts/{k}.txt") for k in ("train", "eval")}


@dataclass(frozen=True)
class ChosenWeightOptions:
    weight: float = option(2.0, "How much more the chosen image's denoising loss counts.", exclusiveMinimum=0)


@pytest.fixture
def toy_objective():
    """A new objective, as a user's module would declare it (then one import in objectives/__init__.py)."""

    @objective("weighted_sft")
    class WeightedSFT(PairObjective):
        Options = ChosenWeightOptions
        description = "SFT weighting the chosen image (a test objective)."
        needs = frozenset({"ddpm"})  # narrower than the pair objectives' default (a trait, not family names)

        def loss(self, policy, data, micro, stream=0):
            chosen, _, noise, timesteps, cond = self.batch_tensors(policy, data, micro, stream)
            losses = self.options.weight * self.denoising_losses(policy, policy.module, chosen, noise, timesteps, cond)
            return losses.mean(), {"train/loss": losses.mean().item()}

    yield WeightedSFT
    del OBJECTIVES["weighted_sft"]


def test_a_new_objective_is_a_config_choice_with_its_own_section(toy_objective):
    cfg = cfgmod.validate({"prompts": PROMPTS, "train": {"loss": "weighted_sft", "weighted_sft": {"weight": 3.0}}})
    assert cfg["train"]["weighted_sft"] == {"weight": 3.0}
    assert "dpo" not in cfg["train"]  # only the chosen objective's section is kept (the job's params)
    with pytest.raises(cfgmod.ConfigError, match="train.weighted_sft.weight: 0 is less than or equal to the minimum"):
        cfgmod.validate({"prompts": PROMPTS, "train": {"loss": "weighted_sft", "weighted_sft": {"weight": 0}}})
    with pytest.raises(cfgmod.ConfigError, match="train.weighted_sft: Additional properties .*'wieght'"):
        cfgmod.validate({"prompts": PROMPTS, "train": {"loss": "weighted_sft", "weighted_sft": {"wieght": 1}}})
    # What it needs of a family is checked at startup, like the built-in objectives'.
    with pytest.raises(cfgmod.ConfigError, match="train.loss: weighted_sft is not available for model.family sd3"):
        cfgmod.validate({"prompts": PROMPTS, "model": {"family": "sd3"}, "train": {"loss": "weighted_sft"}})


def test_a_new_objective_trains_through_the_one_trainer(toy_objective, tiny_model, tmp_path):
    cfg = cfgmod.validate({"prompts": PROMPTS, "train": {"loss": "weighted_sft", "steps": 3, "batch_size": 2,
                                                         "learning_rate": 1e-3, "checkpointing_steps": 2}})
    pipe = models.load_pipeline({"family": "sd15", "path": str(tiny_model)})
    toy = get_objective("weighted_sft").from_config(cfg, 0)
    toy.use_model(ModelInfo(get_family("sd15"), pipe.scheduler.config, pipe.vae_scale_factor))
    trainer = Trainer(toy.train, pipe.unet, seed=0, iteration=0)
    before = [p.detach().clone() for p in trainer.params]
    history, resumed = trainer.run(toy, synthetic_pairs(), tmp_path / "state", "fp", progress=False)
    assert len(history) == 3 and resumed == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.params))


def test_an_unknown_objective_names_the_registered_ones():
    with pytest.raises(cfgmod.ConfigError, match=r"train.loss: 'ppo' is not one of \['awm', 'dgpo', 'dpo', 'grpo', 'mixgrpo', 'nft', 'sft'\]"):
        cfgmod.validate({"prompts": PROMPTS, "train": {"loss": "ppo"}})


@pytest.mark.parametrize("old, new", [("beta", "train.dpo.beta"), ("clip_range", "train.grpo.clip_range"),
                                      ("nft_beta", "train.nft.beta"),
                                      ("inner_epochs", "train.grpo.inner_epochs or train.nft.inner_epochs")])
def test_old_flat_keys_are_refused_naming_the_new_one(old, new):
    with pytest.raises(cfgmod.ConfigError, match=f"train.{old}: now {new}"):
        cfgmod.validate({"prompts": PROMPTS, "train": {old: 1}})


def test_every_objective_declares_what_the_dag_needs():
    for name, declared in OBJECTIVES.items():
        assert declared.signal in ("pairs", "advantages"), name
        assert declared.family_names() and declared.description, name
        assert declared.rollout_adapter == "current" or declared.rollout_adapter in declared.extra_adapters, name
        schema = declared.schema()
        assert all("description" in spec and "default" in spec for spec in schema["properties"].values()), name


def test_an_option_carries_its_default_doc_and_schema_limits():
    from dataclasses import make_dataclass

    from rewardloop.objectives.options import section_schema

    field = option(3, "How many.", minimum=1)
    options = make_dataclass("Options", [("count", int, field)], frozen=True)
    assert options().count == 3
    assert section_schema(options, "An objective.") == {
        "type": "object", "additionalProperties": False, "default": {}, "description": "An objective.",
        "properties": {"count": {"type": "integer", "default": 3, "description": "How many.", "minimum": 1}}}


def test_a_name_registered_twice_is_refused():
    with pytest.raises(ValueError, match="^objective 'dpo' registered twice$"):
        objective("dpo")(type("Again", (PairObjective,), {}))
    assert OBJECTIVES["dpo"].__name__ == "DPO"


def test_summaries_are_means_over_the_run_and_its_quarters():
    dpo = get_objective("dpo")
    history = [{"train/loss": float(i), "train/implicit_acc": i / 10, "other": 1.0} for i in range(1, 11)]
    summary = dpo.summarize(dpo.__new__(dpo), history, resumed_from=4)
    assert summary == pytest.approx({
        "resumed_from_step": 4, "steps": 10,
        "train/loss/mean": 5.5, "train/loss/first_quarter": 2.0, "train/loss/last_quarter": 9.0,
        "train/implicit_acc/mean": 0.55, "train/implicit_acc/first_quarter": 0.2,
        "train/implicit_acc/last_quarter": 0.9})  # a quarter of 10 updates is ceil(2.5) = 3
    assert dpo.summarize(dpo.__new__(dpo), [], 0) == {"resumed_from_step": 0, "steps": 0}
    one = dpo.summarize(dpo.__new__(dpo), [{"train/loss": 2.0}], 0)
    assert one["train/loss/first_quarter"] == one["train/loss/last_quarter"] == 2.0
    assert "train/implicit_acc/mean" not in one


# --- summaries of short runs, optional options, what the registry and the signal table miss -----------------

@pytest.mark.parametrize("steps", [2, 3, 4])
def test_a_quarter_of_up_to_4_updates_is_one_update(steps):
    dpo = get_objective("dpo")
    history = [{"train/loss": float(i)} for i in range(1, steps + 1)]
    summary = dpo.summarize(dpo.__new__(dpo), history, 0)
    assert summary["train/loss/first_quarter"] == 1.0 and summary["train/loss/last_quarter"] == float(steps)


@dataclasses.dataclass(frozen=True)
class ToyOptions:
    limit: Optional[int] = option(None, "A limit, or none.", minimum=1)
    scale: float = option(1.0, "A scale.")


def test_an_optional_option_admits_null_in_its_schema():
    properties = section_schema(ToyOptions, "Toy options.")["properties"]
    assert properties["limit"]["type"] == ["integer", "null"] and properties["scale"]["type"] == "number"


def test_the_registry_and_the_signal_table_name_what_they_miss():
    from rewardloop.objectives.registry import ObjectiveError, TrainingInputs

    with pytest.raises(ObjectiveError, match=r"^train\.loss: unknown objective 'ppo' \(expected one of "
                                             r"awm, dgpo, dpo, grpo, mixgrpo, nft, sft\)$"):
        get_objective("ppo")
    assert get_objective("dpo").schema()["description"] == (
        "Options of train.loss dpo: Diffusion-DPO on preference pairs (the ε-MSE on a UNet; the flow-matching loss "
        "on a flow family).")
    table = TrainingInputs(pd.DataFrame({"sample_id": ["s0"]}), {}, "advantages.parquet", "latents.safetensors")
    with pytest.raises(ObjectiveError, match=r"^advantages\.parquet: missing column\(s\) prompt_id, advantage$"):
        table.rows(("sample_id", "prompt_id", "advantage"), "empty")
