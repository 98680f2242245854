"""EXPO train.py's options as config keys: real trainer steps on the tiny model with synthetic pairs."""

from __future__ import annotations

import pytest
import torch

from rewardloop import config as cfgmod
from rewardloop.models import loading as models
from rewardloop.models.families import get_family
from rewardloop.objectives import get_objective
from rewardloop.objectives.preference import flip_latents
from rewardloop.objectives.registry import ModelInfo
from rewardloop.training.config import TrainConfig
from rewardloop.training.optimizers import (OptimizerError, build_lr_scheduler, build_optimizer,
                                            effective_learning_rate)
from rewardloop.training.trainer import Trainer

from training_inputs import full_cfg, synthetic_pairs
from workflow_helpers import ROOT


def train_cfg(**overrides) -> TrainConfig:
    return TrainConfig.from_section(full_cfg(**overrides)["train"])


def make_trainer(tiny_model, **overrides) -> tuple[Trainer, object]:
    """(Trainer of a fresh LoRA on the tiny UNet, the DPO objective bound to the model)."""
    pipe = models.load_pipeline({"family": "sd15", "path": str(tiny_model)})
    objective = get_objective("dpo").from_config(full_cfg(**overrides), 0)
    objective.use_model(ModelInfo(get_family("sd15"), pipe.scheduler.config, pipe.vae_scale_factor))
    return Trainer(objective.train, pipe.unet, seed=0, iteration=0), objective


def test_scale_lr_multiplies_by_accumulation_batch_and_processes():
    cfg = train_cfg(learning_rate=1e-8, gradient_accumulation_steps=128, batch_size=2, scale_lr=True)
    assert effective_learning_rate(cfg, num_processes=8) == pytest.approx(1e-8 * 128 * 2 * 8)
    assert effective_learning_rate(cfg.replace(scale_lr=False), num_processes=8) == 1e-8


def test_trainer_uses_the_scaled_lr_and_the_configured_schedule(tiny_model):
    trainer, _ = make_trainer(tiny_model, learning_rate=1e-4, batch_size=2, gradient_accumulation_steps=3,
                              scale_lr=True, lr_scheduler="constant_with_warmup", lr_warmup_steps=4, steps=8)
    schedule = build_lr_scheduler(trainer.optimizer, trainer.cfg, 8)
    assert trainer.optimizer.param_groups[0]["initial_lr"] == pytest.approx(6e-4)
    lrs = []
    for _ in range(5):
        lrs.append(schedule.get_last_lr()[0])
        trainer.optimizer.step()
        schedule.step()
    assert lrs == pytest.approx([0, 1.5e-4, 3e-4, 4.5e-4, 6e-4])


def test_optimizer_selection(tiny_model):
    params = [torch.nn.Parameter(torch.ones(4, 4))]
    adamw = build_optimizer(params, train_cfg(), 1e-3)
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["weight_decay"] == 1e-2
    from transformers.optimization import Adafactor

    trainer, objective = make_trainer(tiny_model, optimizer="adafactor", steps=2, batch_size=2, learning_rate=1e-3,
                                      checkpointing_steps=100)
    assert isinstance(trainer.optimizer, Adafactor)
    before = [p.detach().clone() for p in trainer.params]
    loss, _ = objective.loss(trainer.policy, synthetic_pairs(), (0, 0))
    loss.backward()
    trainer.optimizer.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.params))


def test_adamw_8bit_needs_bitsandbytes():
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        with pytest.raises(OptimizerError, match="train.optimizer: adamw_8bit needs .*bitsandbytes"):
            build_optimizer([torch.nn.Parameter(torch.ones(2))], train_cfg(optimizer="adamw_8bit"), 1e-3)
    else:
        pytest.skip("bitsandbytes installed: the error path does not apply")


def test_unknown_optimizer_is_a_config_error():
    with pytest.raises(cfgmod.ConfigError, match="train.optimizer"):
        train_cfg(optimizer="sgd")


def test_proportion_empty_prompts_seeded_and_of_the_right_share(tiny_model):
    _, objective = make_trainer(tiny_model, proportion_empty_prompts=0.2, batch_size=50)
    data = synthetic_pairs()
    masks = torch.stack([objective.micro_batch(data, step, 0).empty_mask for step in range(40)])
    assert masks.float().mean().item() == pytest.approx(0.2, abs=0.03)
    again = torch.stack([objective.micro_batch(data, step, 0).empty_mask for step in range(40)])
    assert torch.equal(masks, again)  # a pure function of (seed, iteration, step)
    batch = objective.micro_batch(data, 0, 0)
    index, empty_mask = batch.index, batch.empty_mask
    cond = data.conditioning(index, empty_mask)["prompt_embeds"]
    assert torch.equal(cond[empty_mask], data.empty["prompt_embeds"].expand(int(empty_mask.sum()), -1, -1))
    assert torch.equal(cond[~empty_mask], data.embeds[index][~empty_mask])
    _, off = make_trainer(tiny_model, batch_size=50)
    assert not off.micro_batch(data, 0, 0).empty_mask.any()
    # Noise and timesteps do not depend on the option.
    assert torch.equal(off.micro_batch(data, 3, 0).noise, objective.micro_batch(data, 3, 0).noise)


def test_hflip_flips_chosen_and_rejected_together(tiny_model):
    data = synthetic_pairs()
    _, objective = make_trainer(tiny_model, hflip=True, batch_size=64)
    flips = objective.micro_batch(data, 0, 0).flip_mask
    assert 0.3 < flips.float().mean().item() < 0.7
    assert not make_trainer(tiny_model, batch_size=64)[1].micro_batch(data, 0, 0).flip_mask.any()
    latents = torch.arange(2 * 1 * 2 * 3, dtype=torch.float32).view(2, 1, 2, 3)
    flipped = flip_latents(latents, torch.tensor([True, False]))
    assert torch.equal(flipped[0, 0, 0], torch.tensor([2.0, 1.0, 0.0])) and torch.equal(flipped[1], latents[1])


def test_gradient_checkpointing_trains_the_same_step(tiny_model):
    data = synthetic_pairs()
    plain, objective = make_trainer(tiny_model, batch_size=2)
    checkpointed, _ = make_trainer(tiny_model, batch_size=2, gradient_checkpointing=True)
    assert checkpointed.model.is_gradient_checkpointing and not plain.model.is_gradient_checkpointing
    checkpointed.model.train(), plain.model.train()
    for trainer in (plain, checkpointed):
        loss, _ = objective.loss(trainer.policy, data, (0, 0))
        loss.backward()
    for a, b in zip(plain.params, checkpointed.params):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)


@pytest.fixture
def fresh_accelerator_state():
    """accelerate keeps one process-wide state (mixed precision included); a job is one process, a test is not."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_bf16_mixed_precision_step_on_the_cpu(tiny_model, fresh_accelerator_state):
    """accelerate's bf16 autocast (the GPU recipes use fp16/bf16; the CPU supports bf16 autocast)."""
    trainer, objective = make_trainer(tiny_model, mixed_precision="bf16", batch_size=2)
    assert trainer.accelerator.mixed_precision == "bf16"
    data = synthetic_pairs()
    batch = objective.micro_batch(data, 0, 0)
    cond = data.conditioning(batch.index)
    with trainer.accelerator.autocast():
        prediction = trainer.model(data.chosen[batch.index], batch.timesteps,
                                   encoder_hidden_states=cond["prompt_embeds"]).sample
    assert prediction.dtype == torch.bfloat16  # the UNet really ran under bf16 autocast
    loss, logs = objective.loss(trainer.policy, data, (0, 0))
    assert torch.isfinite(loss) and loss.dtype == torch.float32  # the loss itself is computed in fp32
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in trainer.params)


def test_null_reward_is_removed_so_recipes_can_drop_the_default_one():
    prompts = {k: str(ROOT / f"resources/prompts/general_{k}.txt") for k in ("train", "eval")}
    cfg = cfgmod.validate({"prompts": prompts, "rewards": {"color_match": None, "jpeg_compressibility": 1.0}})
    assert cfg["rewards"] == {"jpeg_compressibility": 1.0}


def test_adafactor_state_resumes(tiny_model, tmp_path):
    """The in-stage state round-trips Adafactor's (non-Adam) optimizer state."""
    data = synthetic_pairs()
    options = dict(optimizer="adafactor", steps=3, batch_size=2, checkpointing_steps=2, learning_rate=1e-3)
    trainer, objective = make_trainer(tiny_model, **options)
    trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    trainer, objective = make_trainer(tiny_model, **options)
    history, resumed_from = trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    assert resumed_from == 2 and len(history) == 3


@pytest.mark.parametrize("family, size", [("sd15", 512), ("sdxl", 1024)])
def test_resolution_defaults_to_the_family_size(family, size):
    prompts = {k: str(ROOT / f"resources/prompts/{k}.txt") for k in ("train", "eval")}
    cfg = cfgmod.validate({"prompts": prompts, "model": {"family": family}})
    assert cfg["generate"]["resolution"] == size
    assert cfgmod.validate({"prompts": prompts, "model": {"family": family},
                            "generate": {"resolution": 64}})["generate"]["resolution"] == 64
