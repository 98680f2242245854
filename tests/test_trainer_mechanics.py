"""The Trainer's own promises, in seconds on a tiny random-init UNet (no built model):
one update follows the mean of its micro-batch losses, an interrupted run resumes from its last
in-stage checkpoint to the uninterrupted result, a weight that turns NaN stops the run, and the
switches (full fine-tuning, determinism, mixed precision) do what they say."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from objective_checks import config, pair_inputs, prompt_embeds, sd15_model_info, style_latents, tiny_unet
from rewardloop.objectives import get_objective
from rewardloop.objectives.dpo import DPO
from rewardloop.training.trainer import Trainer, TrainingError


def setup(tmp_path, objective_class=None, **train):
    train = {"steps": 6, "batch_size": 4, "learning_rate": 5e-3, "lr_scheduler": "constant", **train}
    cfg = config("config.yaml", loss="dpo", dpo={"beta": 500, "reference": "base"}, **train)
    objective = (objective_class or get_objective("dpo")).from_config(cfg, 0)
    inputs = pair_inputs(style_latents(0, 8, (4, 8, 8), 1), style_latents(1, 8, (4, 8, 8), 2), prompt_embeds(8, 64, 3))
    unet = tiny_unet()
    # Full fine-tuning has no adapter to disable: the reference is a frozen copy (as the train stage loads it).
    reference = copy.deepcopy(unet) if objective.train.adapter == "none" else None
    trainer = Trainer(objective.train, unet, cfg["seed"], 0, reference)
    return objective, trainer, objective.load(inputs, sd15_model_info())


def weights(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.params]


def test_one_update_follows_the_mean_of_its_micro_batch_losses(tmp_path):
    """Accumulated micro-batches (SGD-free check): the first AdamW update of a run with 3 micro-batches moves
    each weight by -lr * sign(g), g the gradient of the mean of the 3 losses, and logs their mean loss."""
    objective, trainer, data = setup(tmp_path, steps=1, gradient_accumulation_steps=3, max_grad_norm=1e9,
                                     weight_decay=0.0)
    before = weights(trainer)
    grads = [torch.zeros_like(p) for p in trainer.params]
    losses = []
    for micro in range(3):
        loss, _ = objective.loss(trainer.policy, data, (0, micro))
        for g, p_grad in zip(grads, torch.autograd.grad(loss, trainer.params, allow_unused=True)):
            if p_grad is not None:
                g += p_grad / 3
        losses.append(loss.item())
    history, _ = trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    assert history[0]["train/loss"] == pytest.approx(sum(losses) / 3, rel=1e-5)
    lr = objective.train.learning_rate
    moved = 0
    for b, a, g in zip(before, weights(trainer), grads):
        big = g.abs() > 1e-4  # Adam's first step: lr * g / (|g| + eps) = lr * sign(g) where |g| >> eps
        if big.any():
            torch.testing.assert_close(a[big] - b[big], -lr * torch.sign(g[big]), rtol=1e-3, atol=1e-7)
            moved += 1
    assert moved > 0
    assert history[0]["lr"] == lr and history[0]["step"] == 0


class StopAfter(DPO):
    """DPO interrupted (as by a kill) after the update that makes ``stop_at`` steps."""

    stop_at = 5

    def after_update(self, policy, step):
        if step + 1 == self.stop_at:
            raise KeyboardInterrupt


def test_an_interrupted_run_resumes_from_its_checkpoint_to_the_uninterrupted_result(tmp_path):
    objective, trainer, data = setup(tmp_path, checkpointing_steps=2)
    uninterrupted, resumed_from = trainer.run(objective, data, tmp_path / "a", "fp", progress=False)
    assert resumed_from == 0 and len(uninterrupted) == 6
    expected = weights(trainer)

    objective, trainer, data = setup(tmp_path, StopAfter, checkpointing_steps=2)
    with pytest.raises(KeyboardInterrupt):
        trainer.run(objective, data, tmp_path / "b", "fp", progress=False)
    objective, trainer, data = setup(tmp_path, checkpointing_steps=2)
    history, resumed_from = trainer.run(objective, data, tmp_path / "b", "fp", progress=False)
    assert resumed_from == 4  # the last checkpoint before the interruption (steps 2 and 4; 5 was lost)
    assert [h["train/loss"] for h in history] == [h["train/loss"] for h in uninterrupted]
    assert all(torch.equal(a, b) for a, b in zip(weights(trainer), expected))
    # A state written for other inputs (another fingerprint) is not resumed.
    objective, trainer, data = setup(tmp_path, checkpointing_steps=2)
    assert trainer.run(objective, data, tmp_path / "b", "other inputs", progress=False)[1] == 0


class NaNWeights(DPO):
    """A finite loss whose gradient is NaN: the update turns the weights NaN."""

    def loss(self, policy, data, micro, stream=0):
        loss, logs = super().loss(policy, data, micro, stream)
        zero = sum(p.sum() for p in policy.trainable) * 0
        return loss + torch.sqrt(zero - zero), logs  # d sqrt(x)/dx at 0 is inf, times 0: NaN


def test_a_weight_turned_nan_stops_the_run_naming_the_step_and_keeps_the_last_good_state(tmp_path):
    """The guard runs before each in-stage checkpoint (so no NaN state is saved) and after the last update."""
    for steps, checkpointing_steps in ((4, 1), (1, 100)):
        objective, trainer, data = setup(tmp_path, NaNWeights, steps=steps, checkpointing_steps=checkpointing_steps)
        state = tmp_path / f"state{steps}"
        with pytest.raises(TrainingError, match=r"^iteration 0, step 0: \d+ trained tensor\(s\) became NaN or inf "
                                                r"\(first: .*lora.*\); the last good state in .* is kept and no "
                                                r"model is saved$"):
            trainer.run(objective, data, state, "fp", progress=False)
        assert not list(state.glob("*")) if state.exists() else True


class InfiniteLoss(DPO):
    def loss(self, policy, data, micro, stream=0):
        loss, logs = super().loss(policy, data, micro, stream)
        return loss * math.inf if micro[0] == 2 else loss, logs


def test_a_non_finite_loss_stops_the_run_naming_the_step(tmp_path):
    objective, trainer, data = setup(tmp_path, InfiniteLoss)
    with pytest.raises(TrainingError, match=r"^iteration 0, step 2: loss is inf; the last good state in .* is kept$"):
        trainer.run(objective, data, tmp_path / "state", "fp", progress=False)


def test_full_fine_tuning_trains_every_weight(tmp_path):
    objective, trainer, data = setup(tmp_path, adapter="none", steps=1)
    unet = trainer.model
    assert len(trainer.params) == len(list(unet.parameters())) and all(p.requires_grad for p in unet.parameters())
    before = weights(trainer)
    trainer.run(objective, data, tmp_path / "state", "fp", progress=False)
    changed = sum(not torch.equal(a, b) for a, b in zip(before, weights(trainer)))
    assert changed > 0.9 * len(before)


def test_deterministic_switch():
    assert not torch.are_deterministic_algorithms_enabled()
    try:
        cfg = config("config.yaml", deterministic=True)
        Trainer(get_objective("dpo").from_config(cfg, 0).train, tiny_unet(), 0, 0)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_mixed_precision_reaches_accelerate():
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        cfg = config("config.yaml", mixed_precision="bf16")
        trainer = Trainer(get_objective("dpo").from_config(cfg, 0).train, tiny_unet(), 0, 0)
        assert trainer.accelerator.mixed_precision == "bf16"
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
