"""DiffusionNFT as published: the loss against an independent float64 computation of the reference
code's formulas, the old policy's schedule, and iterations through the stage functions; the loss on the
policy's device and on a bfloat16 transformer, a KL weight below 1, and a plan that is a pure function of its
seeds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rewardloop.artifacts import read_table, read_tensors
from rewardloop.objectives import get_objective
from rewardloop.objectives.nft import nft_policy_loss, old_policy_decay, optimality
from rewardloop.stages import advantages, generate, score, train

from meta_device import META, meta_items, policy_on  # noqa: F401  (meta_items: a fixture)
from objective_checks import clean_latent_micro_batch, config, flow_velocity, reference_nft_loss, tiny_transformer
from objective_inputs import FlowStep, nft_inputs
from training_inputs import grpo_config


@pytest.mark.parametrize("beta", [1.0, 0.1])
def test_nft_loss_equals_the_reference_formulas_in_float64(beta):
    rng = np.random.default_rng(0)
    shape = (5, 4, 3, 3)
    v, v_old, x0, noise = (rng.standard_normal(shape) for _ in range(4))
    t = rng.uniform(0.01, 1.0, size=5)
    x_t = (1 - t[:, None, None, None]) * x0 + t[:, None, None, None] * noise
    adv = np.array([-7.0, -1.5, 0.0, 2.0, 9.0])  # two beyond the clip of 5
    expected = reference_nft_loss(v, v_old, x_t, x0, t, adv, beta, 5.0)
    as_torch = [torch.tensor(a, dtype=torch.float64) for a in (v, v_old, x_t, x0, t, adv)]
    r = optimality(as_torch[5], 5.0)
    got = nft_policy_loss(*as_torch[:5], r, beta, 5.0)
    assert got.item() == pytest.approx(expected, abs=1e-6, rel=1e-9)


def test_nft_gradient_pulls_good_samples_towards_their_x0_and_pushes_bad_ones_away():
    """One sample, v_old = v at the start: the gradient on v points along the x0 error for r = 1
    (descending moves x0_hat towards x0) and against it for r = 0."""
    x0, noise = torch.zeros(1, 1, 2, 2, dtype=torch.float64), torch.ones(1, 1, 2, 2, dtype=torch.float64)
    t = torch.tensor([0.5], dtype=torch.float64)
    x_t = (1 - t) * x0 + t * noise
    grads = []
    for r in (1.0, 0.0):
        v = torch.full((1, 1, 2, 2), 0.5, dtype=torch.float64, requires_grad=True)
        nft_policy_loss(v, v.detach().clone(), x_t, x0, t, torch.tensor([r], dtype=torch.float64), 1.0, 5.0).backward()
        grads.append(v.grad.sum().item())
    # x0_hat = x_t - t v = 0.25 > x0 = 0: the good sample's loss falls by raising v, the bad one's by lowering it.
    assert grads[0] < 0 < grads[1]


def test_optimality_and_the_old_policy_schedule():
    assert optimality(torch.tensor([-5.0, 0.0, 2.5, 9.0]), 5.0).tolist() == pytest.approx([0.0, 0.5, 0.75, 1.0])
    # decay_type 1 (the SD3.5-M recipes): min(0.001 * step, 0.5); type 2 (OCR): 0 for 75 steps, then 0.0075/step.
    assert [old_policy_decay(s, 0.001, 0.5, 0) for s in (1, 100, 499, 10_000)] == pytest.approx([0.001, 0.1, 0.499, 0.5])
    assert [old_policy_decay(s, 0.0075, 0.999, 75) for s in (10, 75, 175, 10_000)] == pytest.approx([0.0, 0.0, 0.75, 0.999])


def _nft_iteration(cfg, work, it, lora_dir=None):
    folder = work / f"iter_{it:03d}"
    rollout_dir = f"{lora_dir}/old" if lora_dir else None  # NFT samples its old policy
    generate.run(cfg, it, rollout_dir, folder / "samples.parquet", folder / "latents.safetensors", folder / "g.json",
                 progress=False, record_sde=False)
    score.run(cfg, folder / "samples.parquet", folder / "scores.parquet", folder / "s.json", progress=False)
    advantages.run(cfg, folder / "scores.parquet", folder / "advantages.parquet", folder / "a.json",
                   keep_tied_groups=True)
    train.run(cfg, it, folder / "advantages.parquet", folder / "latents.safetensors", lora_dir, folder / "train",
              folder / "state", folder / "t.json", progress=False)
    return folder, json.loads((folder / "t.json").read_text())


def test_nft_iterations_train_the_lora_and_carry_the_old_policy(tiny_sd3_model, tmp_path):
    cfg = grpo_config(tiny_sd3_model, loss="nft", nft={"timestep_fraction": 0.5})
    folder, metrics = _nft_iteration(cfg, tmp_path, 0)
    tensors = read_tensors(folder / "latents.safetensors")
    assert not any(k.startswith("trajectory/") for k in tensors)
    grid = tensors["rollout/sigmas"]
    assert len(grid) == cfg["generate"]["steps"] + 1 and grid[0] == 1.0 and grid[-1] == 0.0
    # Every sample is kept (groups of equal rewards at A = 0); an update = batches x int(4 * 0.5) timesteps.
    samples = len(read_table(folder / "samples.parquet"))
    assert metrics["samples"] == samples
    assert metrics["steps"] == -(-samples // cfg["train"]["batch_size"])
    assert all(np.isfinite(h["train/loss"]) for h in metrics["history"])
    assert metrics["history"][0]["train/old_deviate"] == 0  # v_theta = v_old before the first update
    trained = read_tensors(folder / "train/pytorch_lora_weights.safetensors")
    old = read_tensors(folder / "train/old/pytorch_lora_weights.safetensors")
    assert any(v.abs().sum() > 0 for k, v in trained.items() if "lora_B" in k)
    # The old policy moved by 1 - d towards the trained LoRA: d = min(0.001 * steps, 0.5) from equal starts.
    d = old_policy_decay(metrics["steps"], 0.001, 0.5, 0)
    key = next(k for k in trained if "lora_B" in k)
    assert torch.allclose(old[key], (1 - d) * trained[key], atol=1e-6)
    # Iteration 1 starts from both: its first update sees v_old != v_theta.
    _, metrics1 = _nft_iteration(cfg, tmp_path, 1, lora_dir=str(folder / "train"))
    assert metrics1["history"][0]["train/old_deviate"] > 0


def nft_objective(iteration: int, **nft):
    from rewardloop.config import load
    from rewardloop.objectives import get_objective

    from workflow_helpers import ROOT

    cfg = load(ROOT / "configs/tiny_sd3_grpo.yaml", {"train": {"loss": "nft", "nft": nft}})
    return get_objective("nft").from_config(cfg, iteration)


def test_the_old_policy_soft_update_after_an_iteration():
    """old <- d old + (1 - d) current, d = min(rate (global_step - flat), max), global_step = (it + 1) x updates."""
    from rewardloop.training.policy import Policy

    current, old = torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0])
    policy = Policy(None, None, [current])
    policy.extra["old"] = [old.clone()]
    nft_objective(1, old_decay_rate=0.01, old_decay_max=0.5, old_decay_flat_steps=5).finish(policy, updates=10)
    d = 0.01 * (2 * 10 - 5)
    assert policy.extra["old"][0].tolist() == pytest.approx((d * old + (1 - d) * current).tolist())
    assert current.tolist() == [1.0, 2.0]


def test_the_old_policy_starts_as_the_trained_adapter_unless_it_was_loaded():
    from rewardloop.training.policy import Policy

    weights = torch.tensor([1.0, 2.0])
    fresh = Policy(None, None, [weights])
    nft_objective(0).start(fresh, None)
    assert torch.equal(fresh.extra["old"][0], weights) and fresh.extra["old"][0] is not weights
    loaded = Policy(None, None, [weights])
    loaded.extra["old"] = [torch.tensor([5.0, 5.0])]
    nft_objective(1).start(loaded, None)
    assert loaded.extra["old"][0].tolist() == [5.0, 5.0]


# --- the loss where the policy is and in bfloat16, a KL weight below 1, a seeded plan -----------------------

def test_nft_loss_is_computed_on_the_policy_device(meta_items):  # noqa: F811
    inputs = nft_inputs(1, seed=20)
    cfg = config("configs/tiny_sd3_grpo.yaml", loss="nft", batch_size=4, nft={"kl_beta": 0.5})
    objective = get_objective("nft").from_config(cfg, 0)
    data = objective.load(inputs, FlowStep().model_info())
    policy = policy_on(META, tiny_transformer(), tiny_transformer(1))
    policy.extra["old"] = [p.detach().clone() for p in policy.trainable]
    loss, _ = objective.loss(policy, data, objective.plan(data, 1)[0][0])
    assert loss.device == META and loss.shape == ()  # float64: the reference's adaptive weight is float64


def test_nft_trains_a_bfloat16_transformer():
    """NFT's velocities of a half-precision model: its inputs cast to its dtype, the loss as in fp32."""
    inputs = nft_inputs(1, seed=20)
    cfg = config("configs/tiny_sd3_grpo.yaml", loss="nft", batch_size=4, nft={"kl_beta": 0.0})
    objective = get_objective("nft").from_config(cfg, 0)
    data = objective.load(inputs, FlowStep().model_info())
    micro = objective.plan(data, 1)[0][0]
    losses = []
    for dtype in (torch.float32, torch.bfloat16):
        policy = policy_on("cpu", tiny_transformer(), dtype=dtype)
        policy.extra["old"] = [p.detach().clone() for p in policy.trainable]
        with torch.no_grad():
            loss, _ = objective.loss(policy, data, micro)
        assert torch.isfinite(loss)
        losses.append(loss.item())
    assert losses[1] == pytest.approx(losses[0], rel=0.05)


def test_nft_adds_a_kl_weight_below_1():
    """The reference's train.beta is 1e-4: kl_beta * mean((v - v_ref)^2) is added for any weight > 0."""
    inputs = nft_inputs(1, seed=20)
    cfg = config("configs/tiny_sd3_grpo.yaml", loss="nft", batch_size=4, nft={"kl_beta": 0.5})
    objective = get_objective("nft").from_config(cfg, 0)
    data = objective.load(inputs, FlowStep().model_info())
    model, reference = tiny_transformer(0), tiny_transformer(1)
    policy = policy_on("cpu", model, reference)
    policy.extra["old"] = [p.detach().clone() for p in policy.trainable]
    index, grid_index, noise_seed = objective.plan(data, 1)[0][0]
    rows, x0, embeds, pooled = clean_latent_micro_batch(inputs, index)
    t = inputs.tensors
    sigma = t["rollout/sigmas"][grid_index]
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(noise_seed))
    x_t = (1 - sigma.view(-1, 1, 1, 1)) * x0 + sigma.view(-1, 1, 1, 1) * noise
    with torch.no_grad():
        kl = float(((flow_velocity(model, x_t, sigma, embeds, pooled)
                     - flow_velocity(reference, x_t, sigma, embeds, pooled)) ** 2).mean())
        got, logs = objective.loss(policy, data, (index, grid_index, noise_seed))
    assert kl > 0 and logs["train/kl_loss"] == pytest.approx(kl, rel=1e-4)
    assert got.item() - logs["train/policy_loss"] == pytest.approx(0.5 * kl, rel=1e-3)


def nft_plan(data, iteration: int = 0, **nft):
    cfg = config("configs/tiny_sd3_grpo.yaml", loss="nft", batch_size=4, gradient_accumulation_steps=1, nft=nft)
    return get_objective("nft").from_config(cfg, iteration).plan(data, 1)


def flat(plan) -> list[tuple]:
    return [(tuple(index.tolist()), tuple(grid.tolist()), seed) for update in plan for index, grid, seed in update]


def test_the_nft_plan_is_a_pure_function_of_seed_and_iteration():
    from rewardloop.objectives.clean_latents import CleanLatentData

    grid = torch.linspace(1.0, 0.05, 20)
    data = CleanLatentData(torch.zeros(12, 1), torch.zeros(12), {"prompt_embeds": torch.zeros(12, 1)}, grid)
    torch.manual_seed(1)
    first = flat(nft_plan(data, timestep_fraction=0.15, inner_epochs=2))
    torch.manual_seed(2)  # the global generator plays no part
    assert flat(nft_plan(data, timestep_fraction=0.15, inner_epochs=2)) == first
    other = flat(nft_plan(data, iteration=1, timestep_fraction=0.15, inner_epochs=2))
    assert [m[2] for m in other] != [m[2] for m in first] and [m[1] for m in other] != [m[1] for m in first]
    # Each inner epoch draws every sample a fresh permutation of the grid: no sample repeats its points.
    points: dict[tuple[int, int], tuple] = {}
    per_epoch = 3  # 12 samples in batches of 4
    timesteps = 3  # int(20 x 0.15)
    batches = [first[i: i + timesteps] for i in range(0, len(first), timesteps)]
    for b, micros in enumerate(batches):
        for j, sample in enumerate(micros[0][0]):
            points[(b // per_epoch, sample)] = tuple(m[1][j] for m in micros)
    assert len(points) == 24 and all(points[(0, s)] != points[(1, s)] for s in range(12))
