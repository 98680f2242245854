"""Boundaries and promises that `make mutation` found unguarded by the fast tests: guidance at and
below 1, v-prediction targets, NFT's KL weight below 1 and its plan's seeding, the flow SDE's
degenerate step, PPO's clip boundary, quarters of short runs, 0-dim records, empty pair tables,
registration at run time. Expected values come from the papers, diffusers' conventions and direct
calls of the tiny denoisers, not from the project's helpers.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import pandas as pd
import math

import pytest
import torch

from objective_checks import (alphas_cumprod, clean_latent_micro_batch, config, flow_velocity, pair_inputs,
                              prompt_embeds, sd15_model_info, style_latents, tiny_transformer, tiny_unet)
from objective_inputs import FlowStep, nft_inputs
from meta_device import policy_on
from model_helpers import guided_eps, guided_velocity
from rewardloop.models.families import get_family
from rewardloop.objectives import get_objective
from rewardloop.objectives.grpo import clipped_policy_loss
from rewardloop.objectives.options import option, section_schema
from rewardloop.objectives.registry import ModelInfo
from rewardloop.sampling.sde import sde_std
from rewardloop.sampling.trajectory import StepRecorder



class Counting(torch.nn.Module):
    """A denoiser that records the batch size of every forward pass."""

    def __init__(self, model):
        super().__init__()
        self.model, self.batches = model, []

    @property
    def dtype(self):
        return self.model.dtype

    def forward(self, x, *args, **kwargs):
        self.batches.append(len(x))
        return self.model(x, *args, **kwargs)


# --- classifier-free guidance: only above 1 (diffusers: do_classifier_free_guidance = scale > 1) ---

@pytest.mark.parametrize("guidance", [0.5, 1.0])
@torch.no_grad()
def test_guidance_up_to_1_is_one_conditional_pass(guidance):
    gen = torch.Generator().manual_seed(0)
    x, embeds, uncond = torch.randn(2, 4, 8, 8, generator=gen), torch.randn(2, 16, 64, generator=gen), \
        torch.randn(2, 16, 64, generator=gen)
    unet = Counting(tiny_unet())
    got = guided_eps(unet, x, 501, embeds, uncond, guidance)
    assert unet.batches == [2]
    assert torch.equal(got, unet.model(x, torch.tensor([501, 501]), encoder_hidden_states=embeds).sample)
    x, pooled, uncond_pooled = torch.randn(2, 16, 8, 8, generator=gen), torch.randn(2, 64, generator=gen), \
        torch.randn(2, 64, generator=gen)
    transformer = Counting(tiny_transformer())
    got = guided_velocity(transformer, x, 0.9, embeds, pooled, uncond, uncond_pooled, guidance=guidance)
    assert transformer.batches == [2]
    assert torch.allclose(got.double(), flow_velocity(transformer.model, x, 0.9, embeds, pooled), atol=1e-6)


@torch.no_grad()
def test_guidance_above_1_without_an_unconditional_row_is_the_conditional_pass():
    gen = torch.Generator().manual_seed(1)
    x, embeds = torch.randn(2, 4, 8, 8, generator=gen), torch.randn(2, 16, 64, generator=gen)
    unet = Counting(tiny_unet())
    got = guided_eps(unet, x, 501, embeds, None, 4.0)
    assert unet.batches == [2]
    assert torch.equal(got, unet.model(x, torch.tensor([501, 501]), encoder_hidden_states=embeds).sample)
    x, pooled = torch.randn(2, 16, 8, 8, generator=gen), torch.randn(2, 64, generator=gen)
    transformer = Counting(tiny_transformer())
    got = guided_velocity(transformer, x, 0.9, embeds, pooled, guidance=4.0)
    assert transformer.batches == [2]


# --- pair objectives on a v-prediction model ------------------------------------------------------

def test_sft_on_a_v_prediction_model_regresses_the_velocity():
    """Target v = sqrt(a_t) eps - sqrt(1 - a_t) x0 (Salimans & Ho 2022), not eps."""
    inputs = pair_inputs(style_latents(0, 8, (4, 8, 8), 1), style_latents(1, 8, (4, 8, 8), 2), prompt_embeds(8, 64, 3))
    cfg = config("config.yaml", loss="sft", batch_size=4)
    objective = get_objective("sft").from_config(cfg, 0)
    info = sd15_model_info()
    info = ModelInfo(info.family, {**info.scheduler_config, "prediction_type": "v_prediction"}, info.vae_scale_factor)
    data = objective.load(inputs, info)
    unet = tiny_unet()
    batch = objective.micro_batch(data, 0, 0)
    assert not batch.flip_mask.any() and not batch.empty_mask.any()
    x0 = torch.stack([inputs.tensors[f"latents/{s}"] for s in inputs.signal.chosen.iloc[batch.index.numpy()]])
    embeds = torch.stack([inputs.tensors[f"prompt_embeds/{p}"] for p in inputs.signal.prompt_id.iloc[batch.index.numpy()]])
    a = alphas_cumprod()[batch.timesteps].view(-1, 1, 1, 1)
    noisy = (a.sqrt() * x0 + (1 - a).sqrt() * batch.noise).float()
    with torch.no_grad():
        prediction = unet(noisy, batch.timesteps, encoder_hidden_states=embeds).sample.double()
        got, _ = objective.loss(policy_on("cpu", unet), data, (0, 0))
    velocity = a.sqrt() * batch.noise - (1 - a).sqrt() * x0
    assert got.item() == pytest.approx(((prediction - velocity) ** 2).mean().item(), rel=1e-4)
    assert got.item() != pytest.approx(((prediction - batch.noise) ** 2).mean().item(), rel=1e-2)


# --- DiffusionNFT: a KL weight below 1, and a plan that is a pure function of its seeds ------------

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


# --- the flow SDE's std where 1 - sigma_max is 0; PPO's clip boundary ----------------------------

def test_a_flow_step_without_a_finite_std_is_an_ode_step():
    """std_t = a sqrt(s / (1 - s)) (s = 1 uses sigmas[1]) has no finite value when that sigma is 1."""
    assert sde_std(torch.tensor([1.0, 1.0, 0.5, 0.0]), 0, 0.7) == 0.0
    assert sde_std(torch.tensor([1.0, 1.0, 0.5, 0.0]), 2, 0.7) == pytest.approx(0.7)
    assert sde_std(torch.tensor([1.0, 0.0]), 0, 0.7) == pytest.approx(0.7)  # one step: 1 - sigmas[1] = 1


def test_a_ratio_exactly_at_the_clip_boundary_is_not_clipped():
    """flow_grpo train_sd3.py: clipfrac = mean(|ratio - 1| > clip_range), strictly."""
    log_prob, old = torch.tensor([0.3, -0.2, 0.0]), torch.zeros(3)
    ratio = torch.exp(log_prob - old)
    clip = float((ratio[0] - 1).abs())
    _, clipfrac, _ = clipped_policy_loss(log_prob, old, torch.ones(3), clip)
    assert clipfrac.item() == 0.0
    _, clipfrac, _ = clipped_policy_loss(log_prob, old, torch.ones(3), clip * 0.999)
    assert clipfrac.item() == pytest.approx(1 / 3)


# --- summaries, records, pairs, registration, pipelines ------------------------------------------

@pytest.mark.parametrize("steps", [2, 3, 4])
def test_a_quarter_of_up_to_4_updates_is_one_update(steps):
    dpo = get_objective("dpo")
    history = [{"train/loss": float(i)} for i in range(1, steps + 1)]
    summary = dpo.summarize(dpo.__new__(dpo), history, 0)
    assert summary["train/loss/first_quarter"] == 1.0 and summary["train/loss/last_quarter"] == float(steps)


def test_a_0_dim_tensor_is_recorded_as_a_scalar_for_every_selected_sample():
    recorder = StepRecorder(3)
    recorder.add([True, False, True], std=torch.tensor(0.5), x=torch.arange(3.0), t=7)
    records = recorder.stacked()
    assert records[1] is None
    assert records[0]["std"].tolist() == [0.5] and records[2]["std"].tolist() == [0.5]
    assert records[2]["x"].tolist() == [2.0] and records[2]["t"].tolist() == [7.0]


def test_pair_tables_keep_their_dtypes_when_empty_and_a_fresh_index_when_reordered():
    from rewardloop.signal.pairing import PAIR_COLUMNS, build_pairs

    def scores(rows):
        return pd.DataFrame(rows, columns=["sample_id", "prompt_id", "reward"])

    empty = build_pairs(scores([("a", "p", 1.0), ("b", "p", 1.0)]))
    assert empty.empty and [str(empty[c].dtype) for c in PAIR_COLUMNS[3:]] == ["float64"] * 3
    # Ranked by reward z > a > m: found as (z, a), (z, m), (a, m), stored sorted by chosen then rejected.
    pairs = build_pairs(scores([("z", "p", 3.0), ("a", "p", 2.0), ("m", "p", 1.0)]), "all_above_margin")
    assert pairs[["chosen", "rejected"]].values.tolist() == [["a", "m"], ["z", "a"], ["z", "m"]]
    assert list(pairs.index) == [0, 1, 2]


def test_a_strategy_registered_at_run_time_is_selectable():
    from rewardloop.sampling import step_strategies

    def every_other(cfg, num_steps, sample_seeds, iteration_seed):
        return [list(range(0, num_steps, 2)) for _ in sample_seeds]

    try:
        assert step_strategies.register("every_other")(every_other) is every_other
        assert step_strategies.select_sde_steps({"strategy": "every_other"}, 5, [1, 2], 0) == [[0, 2, 4]] * 2
    finally:
        step_strategies.STRATEGIES.pop("every_other", None)


@pytest.mark.parametrize("strategy", [{"strategy": "sde_window", "num_sde_steps": 2, "window_range": [0, 10]},
                                      {"strategy": "epoch_global_random_choice", "num_sde_steps": 2,
                                       "candidate_steps": [1, 3, 5]}])
def test_grpo_startup_check_accepts_each_strategy(strategy):
    get_objective("grpo").check({"model": {"family": "sd3"},
                                 "generate": {"steps": 10, "sde": {"noise_level": 0.7, **strategy}}})


def test_a_pipeline_without_a_third_text_encoder_has_no_t5_tokens():
    class Pipeline:  # an SD3-like pipeline class that has no text_encoder_3 attribute at all
        transformer = None

    assert get_family("sd3").t5_tokens(Pipeline()) == 0


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
                                             r"awm, dpo, grpo, nft, sft\)$"):
        get_objective("ppo")
    assert get_objective("dpo").schema()["description"] == (
        "Options of train.loss dpo: Diffusion-DPO on preference pairs (the ε-MSE on a UNet; the flow-matching loss "
        "on a flow family).")
    table = TrainingInputs(pd.DataFrame({"sample_id": ["s0"]}), {}, "advantages.parquet", "latents.safetensors")
    with pytest.raises(ObjectiveError, match=r"^advantages\.parquet: missing column\(s\) prompt_id, advantage$"):
        table.rows(("sample_id", "prompt_id", "advantage"), "empty")


# --- a dynamically shifted flow grid follows the image's token count -----------------------------

def test_a_dynamically_shifted_grid_follows_the_images_token_count():
    """SD3 pipeline's calculate_shift: mu = m * tokens + b on the line through (base_image_seq_len, base_shift) and
    (max_image_seq_len, max_shift) of the config, tokens = (h / patch) (w / patch) of the latent;
    sigma = e^mu / (e^mu + 1 / s - 1) on s = linspace(1, 1e-3, N)."""
    from types import SimpleNamespace

    from diffusers import FlowMatchEulerDiscreteScheduler

    from rewardloop.sampling.ddim import SamplerSettings
    from rewardloop.sampling.flow import rollout_sigmas

    pipe = SimpleNamespace(vae_scale_factor=8, transformer=SimpleNamespace(config=SimpleNamespace(in_channels=16,
                                                                                                  patch_size=2)))
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                                base_image_seq_len=256, max_image_seq_len=4096)
    grids = {}
    for resolution in (512, 1024, 384):  # 1024, 4096 and 576 tokens
        settings = SamplerSettings(steps=4, guidance_scale=1.0, eta=0.0, resolution=resolution)
        tokens = (resolution // 8 // 2) ** 2
        mu = 0.5 + (1.15 - 0.5) * (tokens - 256) / (4096 - 256)
        s = torch.linspace(1.0, 1e-3, 4, dtype=torch.float64)
        expected = torch.cat([math.exp(mu) / (math.exp(mu) + 1 / s - 1), torch.zeros(1, dtype=torch.float64)])
        grids[resolution] = rollout_sigmas(pipe, get_family("sd3"), scheduler, settings)
        torch.testing.assert_close(grids[resolution].double(), expected, rtol=1e-5, atol=1e-6)
    assert (grids[1024][1:-1] > grids[512][1:-1]).all()  # more tokens, more shift
