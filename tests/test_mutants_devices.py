"""Where the objectives' and samplers' tensors live, and in which dtype (what `make mutation` found
unguarded: a dropped ``.to(device)`` or ``.to(dtype)`` passes every CPU fp32 test).

A machine without a GPU still has a second device: the policy here lives on torch's ``meta``
device (shapes and dtypes, no data), so a tensor left on the CPU fails exactly as it fails beside
a CUDA model ("not on the expected device"). A denoiser kept in bfloat16, as a half-precision base
model is, fails the same way on an input left in fp32. The expected values are direct calls of the
tiny denoisers and the papers' formulas (objective_checks.py), not the project's helpers.
"""

from __future__ import annotations

import copy

import pytest
import torch

from objective_checks import (config, ddim_mean_reference, flow_sde_mean, flow_velocity, pair_inputs, prompt_embeds,
                              sd15_model_info, style_latents, tiny_transformer, tiny_unet)
from meta_device import META, meta_items, on_meta, policy_on  # noqa: F401  (meta_items: a fixture)
from objective_inputs import DDIMStep, FlowStep, nft_inputs, rollout_inputs
from model_helpers import guided_eps, guided_velocity
from rewardloop.objectives import get_objective
from rewardloop.objectives.grpo import kl_to_reference
from rewardloop.sampling.ddim_logprob import ddim_mean
from rewardloop.sampling.sde import gaussian_log_prob, sde_step, step_mean, transition_log_prob

# --- every loss runs where the policy is --------------------------------------------------------

@pytest.mark.parametrize("guidance", [1.0, 2.0], ids=["plain", "cfg"])
@pytest.mark.parametrize("step", [FlowStep(), DDIMStep()], ids=["sd3-flow-sde", "sd15-ddim"])
def test_grpo_loss_is_computed_on_the_policy_device_in_fp32(meta_items, step, guidance):  # noqa: F811
    inputs = rollout_inputs(step, step.denoiser(), [1, -1, 1, -1], [1.0, -1.0, 0.5, -0.5], seed=10)
    inputs.tensors["rollout/guidance_scale"] = torch.tensor(guidance)
    objective = get_objective("grpo").from_config(step.config(kl_beta=0.5), 0)
    data = objective.load(inputs, step.model_info())
    assert data.advantages.dtype == torch.float32  # the table's float64 advantages, as the rest: fp32
    loss, logs = objective.loss(policy_on(META, step.denoiser(), step.denoiser()), data, (torch.tensor([2, 0]), 0))
    assert loss.device == META and loss.dtype == torch.float32 and loss.shape == ()
    assert set(logs) >= {"train/loss", "train/kl_loss", "train/clipfrac"}


def test_nft_loss_is_computed_on_the_policy_device(meta_items):  # noqa: F811
    inputs = nft_inputs(1, seed=20)
    cfg = config("configs/tiny_sd3_grpo.yaml", loss="nft", batch_size=4, nft={"kl_beta": 0.5})
    objective = get_objective("nft").from_config(cfg, 0)
    data = objective.load(inputs, FlowStep().model_info())
    policy = policy_on(META, tiny_transformer(), tiny_transformer(1))
    policy.extra["old"] = [p.detach().clone() for p in policy.trainable]
    loss, _ = objective.loss(policy, data, objective.plan(data, 1)[0][0])
    assert loss.device == META and loss.shape == ()  # float64: the reference's adaptive weight is float64


@pytest.mark.parametrize("loss", ["dpo", "sft"])
def test_pair_losses_are_computed_on_the_policy_device_in_fp32(meta_items, loss):  # noqa: F811
    inputs = pair_inputs(style_latents(0, 8, (4, 8, 8), 1), style_latents(1, 8, (4, 8, 8), 2), prompt_embeds(8, 64, 3))
    inputs.tensors["empty_prompt/prompt_embeds"] = prompt_embeds(1, 64, seed=4)[0]
    cfg = config("config.yaml", loss=loss, batch_size=4, hflip=True, proportion_empty_prompts=0.5)
    objective = get_objective(loss).from_config(cfg, 0)
    data = objective.load(inputs, sd15_model_info())
    got, _ = objective.loss(policy_on(META, tiny_unet(), tiny_unet(1)), data, (0, 0))
    assert got.device == META and got.dtype == torch.float32 and got.shape == ()


# --- the samplers' helpers keep to the latents' device and compute in fp32 ----------------------

@pytest.mark.parametrize("guidance", [1.0, 3.0], ids=["plain", "cfg"])
def test_guided_predictions_stay_on_the_latents_device(guidance):
    """A python timestep or sigma (as the samplers pass them) becomes a tensor on the latents' device."""
    x, embeds, uncond = on_meta((2, 4, 8, 8), (2, 16, 64), (2, 16, 64))
    assert guided_eps(tiny_unet().to(META), x, 501, embeds, uncond, guidance).device == META
    x, pooled, uncond_pooled = on_meta((2, 16, 8, 8), (2, 64), (2, 64))
    assert guided_velocity(tiny_transformer().to(META), x, 0.9, embeds, pooled, uncond, uncond_pooled,
                           guidance).device == META


def test_the_step_helpers_stay_on_the_latents_device_with_python_constants():
    x, v, noise = on_meta((2, 4, 8, 8), (2, 4, 8, 8), (2, 4, 8, 8))
    assert step_mean(v, x, 0.9, 0.75, 0.3).device == META
    assert ddim_mean(v, x, 0.5, 0.7, 0.2).device == META
    assert gaussian_log_prob(x, v, 0.4).device == META
    assert transition_log_prob(x, v, 0.9, 0.75, 0.3).device == META
    assert all(t.device == META for t in sde_step(v, x, 0.9, 0.75, 0.3, noise))
    assert kl_to_reference(x, v, 0.3).device == META


def test_the_step_helpers_compute_in_fp32_whatever_the_constants_dtype():
    """Per-sample constants in float64 (numpy, parquet) give fp32 results equal to the papers' formulas."""
    gen = torch.Generator().manual_seed(0)
    x, v, noise = (torch.randn(2, 4, 8, 8, generator=gen) for _ in range(3))

    def f64(*values):
        return torch.tensor(values, dtype=torch.float64)

    sigma, sigma_next, std = f64(0.9, 0.6), f64(0.75, 0.4), f64(0.3, 0.5)
    mean = step_mean(v, x, sigma, sigma_next, std)
    assert mean.dtype == torch.float32
    for i in range(2):
        expected = flow_sde_mean(v[i: i + 1].double(), x[i: i + 1], float(sigma[i]), float(sigma_next[i]), float(std[i]))
        assert torch.allclose(mean[i: i + 1].double(), expected, atol=1e-5)
    stepped, _ = sde_step(v, x, sigma, sigma_next, std, noise)
    assert stepped.dtype == torch.float32
    a_t, a_prev, ddim_std = f64(0.3, 0.5), f64(0.6, 0.8), f64(0.2, 0.1)
    ddim = ddim_mean(v, x, a_t, a_prev, ddim_std)
    assert ddim.dtype == torch.float32
    for i in range(2):
        expected = ddim_mean_reference(v[i: i + 1], x[i: i + 1], float(a_t[i]), float(a_prev[i]), float(ddim_std[i]))
        assert torch.allclose(ddim[i: i + 1].double(), expected, atol=1e-5)
    scale = f64(0.5, 2.0)
    log_prob = gaussian_log_prob(noise, x, scale)
    assert log_prob.dtype == torch.float32
    expected = torch.distributions.Normal(x.double(), scale.view(2, 1, 1, 1)).log_prob(noise.double()).mean((1, 2, 3))
    assert torch.allclose(log_prob.double(), expected, atol=1e-5)
    assert transition_log_prob(noise, x, sigma, sigma_next, std).dtype == torch.float32
    kl = kl_to_reference(x, v, f64(0.3, 0.6))
    assert kl.dtype == torch.float32
    expected = ((x.double() - v.double()) ** 2).mean((1, 2, 3)) / (2 * torch.tensor([0.3, 0.6], dtype=torch.float64) ** 2)
    assert torch.allclose(kl.double(), expected, rtol=1e-5)


# --- a bfloat16 denoiser gets its inputs in bfloat16 ----------------------------------------------

def close(got: torch.Tensor, expected: torch.Tensor, tolerance: float = 0.05) -> bool:
    """Within bfloat16's precision: the error's norm a few percent of the value's."""
    return float((got.double() - expected.double()).norm() / expected.double().norm()) < tolerance


@pytest.mark.parametrize("guidance", [1.0, 3.0], ids=["plain", "cfg"])
def test_a_bfloat16_unet_gets_its_inputs_in_bfloat16(guidance):
    gen = torch.Generator().manual_seed(0)
    x, embeds, uncond = torch.randn(2, 4, 8, 8, generator=gen), torch.randn(2, 16, 64, generator=gen), \
        torch.randn(2, 16, 64, generator=gen)
    unet = tiny_unet()
    with torch.no_grad():
        e_text = unet(x, torch.tensor([501, 501]), encoder_hidden_states=embeds).sample
        e_uncond = unet(x, torch.tensor([501, 501]), encoder_hidden_states=uncond).sample
        expected = e_uncond + guidance * (e_text - e_uncond) if guidance > 1 else e_text
        got = guided_eps(copy.deepcopy(unet).to(torch.bfloat16), x, 501, embeds, uncond, guidance)
    assert got.dtype == torch.float32 and close(got, expected)


@pytest.mark.parametrize("guidance", [1.0, 3.0], ids=["plain", "cfg"])
def test_a_bfloat16_transformer_gets_its_inputs_in_bfloat16(guidance):
    gen = torch.Generator().manual_seed(0)
    x, embeds, pooled = torch.randn(2, 16, 8, 8, generator=gen), torch.randn(2, 16, 64, generator=gen), \
        torch.randn(2, 64, generator=gen)
    uncond, uncond_pooled = torch.randn(2, 16, 64, generator=gen), torch.randn(2, 64, generator=gen)
    transformer = tiny_transformer()
    with torch.no_grad():
        v_text = flow_velocity(transformer, x, 0.9, embeds, pooled)
        v_uncond = flow_velocity(transformer, x, 0.9, uncond, uncond_pooled)
        expected = v_uncond + guidance * (v_text - v_uncond) if guidance > 1 else v_text
        got = guided_velocity(copy.deepcopy(transformer).to(torch.bfloat16), x, 0.9,
                              embeds, pooled, uncond, uncond_pooled, guidance=guidance)
    assert got.dtype == torch.float32 and close(got, expected)


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
