"""Direct Group Preference Optimization (train.loss: dgpo): its loss and gradient against Luo-Yihong/DGPO's
``compute_group_dgpo_loss_allreduce`` and PPO-style clip written out here in numpy (float64), its plan (whole
groups per batch, M timesteps of the noisiest trunc_steps + 1 per inner epoch), its shared noise, its EMA
reference, and its direction on held-out images. Seconds each, on the tiny random-init SD3 transformer.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from objective_checks import config, tiny_transformer, trained
from objective_inputs import FlowStep, held_out_flow_matching_shift, nft_inputs
from rewardloop.objectives.dgpo import clipped_dsm, ema_ref_decay, group_preference_loss, per_sample_mse
from rewardloop.training.state import STATE_FILE


def dgpo_config(**dgpo):
    """The tests' rollouts step 4 times in groups of 2: the M = 4 timesteps are all of them (trunc_steps 3)."""
    return config("configs/tiny_sd3_grpo.yaml", {"generate": {"images_per_prompt": 2}}, loss="dgpo", batch_size=4,
                  learning_rate=3e-3, gradient_accumulation_steps=1, dgpo={"trunc_steps": 3, **dgpo})


def reference_loss_and_gradient(model_v, ref_v, old_v, target, advantages, group_ids, group_size, beta_dpo,
                                clip_range):
    """The reference's DGPO loss with clip_dsm (numpy, float64) and its gradient with respect to model_v: the
    clipped samples' dsm is detached, the group weights sigmoid(sum_g A beta (dsm - ref_dsm) / G) too."""
    batch = len(model_v)
    flat = lambda x: x.reshape(batch, -1)  # noqa: E731
    dsm = (flat(target - model_v) ** 2).mean(axis=1)
    ref_dsm = (flat(target - ref_v) ** 2).mean(axis=1)
    old_dsm = (flat(target - old_v) ** 2).mean(axis=1)
    ratio = np.exp(-dsm + old_dsm)
    should_clip = np.where(advantages > 0, ratio > 1.0 + clip_range, ratio < 1.0 - clip_range)
    per_sample = advantages * beta_dpo * (dsm - ref_dsm) / group_size
    sums = np.zeros(group_ids.max() + 1)
    np.add.at(sums, group_ids, per_sample)
    weights = 1.0 / (1.0 + np.exp(-sums))[group_ids]
    loss = (weights * advantages * dsm).mean()
    live = weights * advantages * ~should_clip  # d loss / d dsm, zero where dsm is detached
    gradient = live[:, None] * 2.0 * flat(model_v - target) / flat(model_v).shape[1] / batch
    return loss, gradient.reshape(model_v.shape), should_clip, weights


def test_the_loss_and_its_gradient_are_the_references():
    rng = np.random.default_rng(0)
    shape, group_size = (12, 4, 3, 3), 3
    target, model_v = rng.standard_normal(shape), rng.standard_normal(shape)
    ref_v = model_v + 0.3 * rng.standard_normal(shape)
    old_v = model_v + 0.05 * rng.standard_normal(shape)  # the EMA reference: close to the policy
    advantages = rng.standard_normal(12).clip(-5, 5)
    group_ids = np.repeat(np.arange(4), group_size)
    loss, gradient, should_clip, weights = reference_loss_and_gradient(
        model_v, ref_v, old_v, target, advantages, group_ids, group_size, beta_dpo=100.0, clip_range=0.01)
    assert 0 < should_clip.sum() < 12  # the clip holds for some samples, not all
    v = torch.tensor(model_v, requires_grad=True)
    t = lambda x: torch.tensor(x)  # noqa: E731
    adv = t(advantages)
    dsm, mask = clipped_dsm(per_sample_mse(v, t(target)), per_sample_mse(t(old_v), t(target)), adv, 0.01)
    got, got_weights = group_preference_loss(dsm, per_sample_mse(t(ref_v), t(target)), adv, t(group_ids), 100.0)
    got.backward()
    assert np.array_equal(mask.numpy(), should_clip)
    np.testing.assert_allclose(got.item(), loss, rtol=1e-12)
    np.testing.assert_allclose(got_weights.numpy(), weights, rtol=1e-12)
    np.testing.assert_allclose(v.grad.numpy(), gradient, rtol=1e-10, atol=1e-15)
    # the weights are a group's: equal within it, and they differ between groups
    assert len(set(np.round(weights, 12))) == 4


def test_the_plan_packs_whole_groups_and_draws_the_epochs_timesteps_from_the_noisiest(tmp_path):
    inputs = nft_inputs(1, seed=20)  # 8 groups of 2 samples; grid [1, 0.9, 0.75, 0.5]
    objective, _, data, _ = trained(dgpo_config(trunc_steps=2, num_train_timesteps=2, inner_epochs=2),
                                    tiny_transformer(), inputs, FlowStep().model_info(), tmp_path)
    plan = objective.plan(data, 1)
    assert len(plan) == 8 and all(len(update) == 2 for update in plan)  # 4 batches an epoch, 2 timesteps each
    for update in plan:
        index = update[0][0]
        prompts = inputs.signal.prompt_id.to_numpy()[index.numpy()]
        assert len(index) == 4 and all((prompts == p).sum() == 2 for p in set(prompts))  # whole groups
    per_epoch = [{g for update in plan[e * 4:(e + 1) * 4] for _, g, _ in update} for e in (0, 1)]
    assert all(len(drawn) == 2 and drawn <= {0, 1, 2} for drawn in per_epoch)  # shared in an epoch, no sigma 0.5
    assert len({seed for update in plan for _, _, seed in update}) == 16
    assert [(g, s) for u in objective.plan(data, 1) for _, g, s in u] == [(g, s) for u in plan for _, g, s in u]


def test_a_group_shares_its_noise(tmp_path):
    objective, _, data, _ = trained(dgpo_config(), tiny_transformer(), nft_inputs(1, seed=20), FlowStep().model_info(),
                                    tmp_path)
    x0 = torch.zeros(6, 4, 2, 2)
    noise = objective.noise(x0, torch.tensor([0, 0, 1, 1, 2, 2]), seed=5)
    assert torch.equal(noise[0], noise[1]) and not torch.equal(noise[1], noise[2])
    objective.options = type(objective.options)(shared_noise=False)
    assert not torch.equal(*objective.noise(x0, torch.tensor([0, 0, 1, 1, 2, 2]), seed=5)[:2])


def test_the_ema_reference_follows_every_optimizer_step_and_is_in_the_in_stage_state(tmp_path):
    assert [ema_ref_decay(step, 0.001, 0.3) for step in (0, 100, 300, 5000)] == [0.0, 0.1, 0.3, 0.3]
    cfg = dgpo_config()
    cfg["train"]["checkpointing_steps"] = 1
    objective, trainer, _, history = trained(cfg, tiny_transformer(), nft_inputs(1, seed=20), FlowStep().model_info(),
                                             tmp_path)
    policy = trainer.policy
    # decay 0 at the first steps of iteration 0: the EMA reference is the trained weights after each step
    for ema, current in zip(policy.extra["ema_ref"], policy.trainable):
        torch.testing.assert_close(ema, current.detach())
    from safetensors import safe_open

    with safe_open(str(tmp_path / STATE_FILE), framework="pt") as state:
        assert {f"param/ema_ref.{i}" for i in range(len(policy.trainable))} <= set(state.keys())
    start = [p.detach() * 0 + 1.0 for p in policy.trainable]
    policy.extra["ema_ref"] = [s.clone() for s in start]
    objective.iteration, objective.updates_per_iteration = 2, 50  # global step 2 x 50 + 3 = 103: d = 0.103
    objective.after_update(policy, 3)
    for ema, s, p in zip(policy.extra["ema_ref"], start, policy.trainable):
        torch.testing.assert_close(ema, 0.103 * s + 0.897 * p.detach())


@pytest.mark.parametrize("direction", [1, -1])
def test_dgpo_lowers_the_flow_matching_error_of_high_advantage_images(tmp_path, direction):
    """Held-out images of the style with the positive advantage become easier to generate; a flipped sign fails."""
    cfg = dgpo_config(inner_epochs=2)  # the recipe's beta_dpo, clip and KL
    _, trainer, _, _ = trained(cfg, tiny_transformer(), nft_inputs(direction, seed=20), FlowStep().model_info(), tmp_path)
    moved = held_out_flow_matching_shift(trainer.model)
    assert moved * direction < 0, moved


@pytest.mark.parametrize("overrides, message", [
    ({"train": {"dgpo": {"num_train_timesteps": 6}}},
     r"^train\.dgpo\.num_train_timesteps: 6 timesteps cannot be drawn without replacement from the first"),
    ({"train": {"dgpo": {"trunc_steps": 10}}},
     r"^train\.dgpo\.trunc_steps: 10 \+ 1 timesteps of a rollout of generate\.steps 10; at most 9$"),
    ({"train": {"batch_size": 12}, "generate": {"images_per_prompt": 16}},
     r"^train\.batch_size: 12 x 1 process\(es\) holds no whole group of generate\.images_per_prompt 16 samples")])
def test_what_dgpo_cannot_train_is_refused_at_startup(overrides, message):
    from rewardloop.config import ConfigError, deep_merge, load
    from workflow_helpers import ROOT

    with pytest.raises(ConfigError, match=message):
        load(ROOT / "configs/tiny_sd3_dgpo.yaml", deep_merge({"generate": {"steps": 10}}, overrides))
