"""Every objective on FLUX.1 (dev: the guidance scale embedded; schnell: no guidance input), in seconds.

Each trains a real peft LoRA (flux.py's lora_targets, flow_grpo's train_flux.py targets) on the tiny
random-init FLUX.1 transformer (rewardloop.models.tiny.flux) through the same objective ``load`` /
``plan`` / ``loss`` and Trainer as the other families (objective_checks.py, test_objective_direction.py),
with

* (a) its direction: on held-out data the model moves the way of the signal, and the opposite way on the
  swapped signal (chosen and rejected swapped, or the advantages' sign flipped);
* (b) its loss on a micro-batch recomputed where the FLUX path differs from SD3's: the velocity is a
  hand-written FluxPipeline-style transformer call (``objective_checks.flux_velocity``: diffusers' own
  ``_pack_latents`` / ``_prepare_latent_image_ids`` / ``_unpack_latents``, the timestep / 1000, the
  guidance embedding at the rollout's scale on dev, none on schnell), never the adapter's ``predict``.

Flow-GRPO-Fast is no separate training path: it is the rollouts' ``generate.sde`` window (strategy
sde_window with fewer SDE steps, configs/tiny_sd3_grpo_fast.yaml), and GRPO trains the recorded steps
whatever picked them. Its FLUX check is a real rollout of the tiny FLUX.1-dev pipeline with such a
window (2 of 4 steps recorded) that GRPO re-scores to the recorded log-probs and trains on.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from objective_checks import (FLUX_DEV, FLUX_SCHNELL, clean_latent_micro_batch, config, flux_velocity, pair_inputs,
                              prompt_embeds, reference_nft_loss, style_latents, three_velocities, train, trained)
from objective_inputs import (BAD, GOOD, CPSStep, FlowStep, MixGRPOStep, held_out_flow_matching_shift, held_out_lean,
                              nft_inputs, rollout_inputs)
from rewardloop.models.families import get_family
from rewardloop.objectives import get_objective
from rewardloop.objectives.registry import TrainingInputs
from rewardloop.training.trainer import Trainer

FLUX = get_family("flux")
torch.set_num_threads(1)


def flux_config(flow, base: str, loss: str, overrides: dict | None = None, **train):
    """configs/``base`` on ``flow``'s family (model.family flux) with flux's LoRA targets and ``train``."""
    return config(base, {**flow.overrides(), **(overrides or {})}, loss=loss, **flow.train_options(), **train)


def test_the_flux_lora_trained_here_is_flux_py_s_targets():
    """What the checks below train: flux.py's lora_targets (flow_grpo's), matched in joint and single blocks."""
    cfg = flux_config(FLUX_DEV, "configs/tiny_sd3_grpo.yaml", "grpo")
    assert cfg["model"]["family"] == "flux" and cfg["train"]["lora"]["targets"] == list(FLUX.lora_targets)
    objective = get_objective("grpo").from_config({**cfg, "seed": 0}, 0)
    model = FLUX_DEV.denoiser()
    Trainer(objective.train, model, 0, 0)
    adapted = {n for n, m in model.named_modules() if "default" in getattr(m, "lora_A", {})}
    assert {"transformer_blocks.0.attn.add_q_proj", "transformer_blocks.0.ff_context.net.2",
            "single_transformer_blocks.0.attn.to_q"} <= adapted


def test_the_default_lora_targets_are_the_familys():
    """train.lora.targets: null (the schema's default) is filled with the family's list: flow_grpo's on FLUX."""
    cfg = config("configs/tiny_sd3_grpo.yaml", FLUX_DEV.overrides())
    assert sorted(cfg["train"]["lora"]["targets"]) == sorted(FLUX.lora_targets)
    sd3 = config("configs/tiny_sd3_grpo.yaml")
    assert sd3["train"]["lora"]["targets"] == ["to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"]


# --- GRPO: flow SDE, CPS, GRPO-Guard ---------------------------------------------------------------

GRPO_STEPS = {"dev-flow-sde": FlowStep(FLUX_DEV), "dev-cps": CPSStep(FLUX_DEV), "schnell-flow-sde": FlowStep(FLUX_SCHNELL)}
# MixGRPO trains the same recorded SDE steps with Flow-GRPO's surrogate (its own options: clip 1e-4, no KL)
MIXGRPO_STEPS = {"dev-mixgrpo": MixGRPOStep(FLUX_DEV), "schnell-mixgrpo": MixGRPOStep(FLUX_SCHNELL)}


@pytest.mark.parametrize("direction", [1, -1])
@pytest.mark.parametrize("guard", [False, True], ids=["grpo", "guard"])
@pytest.mark.parametrize("name", list(GRPO_STEPS) + list(MIXGRPO_STEPS))
def test_grpo_on_flux_raises_the_likelihood_of_high_advantage_transitions(tmp_path, name, guard, direction):
    """Held-out transitions leaning the high-advantage way gain log-likelihood (the measure: the hand-written
    FLUX call + the step's formula, objective_checks); the flipped advantages move it the other way."""
    step = GRPO_STEPS.get(name) or MIXGRPO_STEPS[name]
    if guard and (step.sde_type != 0 or name in MIXGRPO_STEPS):
        pytest.skip("GRPO-Guard normalises Flow-GRPO's own SDE steps only (CPS is refused at startup)")
    if guard and step.flow is FLUX_SCHNELL:
        pytest.skip("one guard case (dev) is enough: the guard reads the same means")
    base = step.denoiser()
    leans = [1, -1] * 8
    inputs = rollout_inputs(step, base, leans, [direction * lean for lean in leans], seed=10)
    trained_model = train(step.config(guard=guard), step.denoiser(), inputs, step.model_info(), tmp_path)
    lean = held_out_lean(step, base, trained_model)
    assert lean * direction > 0, lean


@pytest.mark.parametrize("guard", [False, True], ids=["grpo", "guard"])
@pytest.mark.parametrize("name", list(GRPO_STEPS))
def test_grpo_loss_on_flux_equals_the_hand_written_pipeline_call(tmp_path, name, guard):
    """Flow-GRPO's clipped surrogate and KL (flow_grpo train_flux.py) on recorded FLUX transitions: before
    training, the re-scored log-prob is the recorded one (the LoRA starts at B = 0, so the rollout's model); after,
    every logged term equals the recomputation from the hand-written pipeline call at the recorded guidance (dev:
    3.5 embedded; another scale would give another loss) and the step's own formula. 1e-5 on the losses."""
    step = GRPO_STEPS[name]
    if guard and step.sde_type != 0:
        pytest.skip("GRPO-Guard is for Flow-GRPO SDE steps")
    leans = [1, -1] * 4
    inputs = rollout_inputs(step, step.denoiser(), leans, [1.5, -0.5, 0.2, -1.0, 2.0, -2.0, 0.7, -0.9], seed=10)
    assert float(inputs.tensors["rollout/guidance_scale"]) == step.guidance
    clip = 0.005
    cfg = step.config(clip_range=clip, kl_beta=0.5, guard=guard)
    index = torch.tensor([5, 0, 3, 6])
    untrained = get_objective("grpo").from_config({**cfg, "seed": 0}, 0)
    policy = Trainer(untrained.train, step.denoiser(), 0, 0).policy
    with torch.no_grad():
        _, logs = untrained.loss(policy, untrained.load(inputs, step.model_info()), (index, 0))
    assert logs["train/log_prob_mean_abs_diff"] < 1e-5 and logs["train/kl_loss"] == 0
    objective, trainer, data, _ = trained(cfg, step.denoiser(), inputs, step.model_info(), tmp_path)
    rows = inputs.signal.iloc[index.numpy()]
    t = inputs.tensors

    def recorded(name):
        return torch.stack([t[f"trajectory/{s}/{name}"][0] for s in rows.sample_id])

    x, next_x, old = recorded("latents"), recorded("next_latents"), recorded("log_probs").double()
    embeds = torch.stack([t[f"prompt_embeds/{p}"] for p in rows.prompt_id])
    pooled = step.pooled(t, rows.prompt_id)
    model = trainer.model
    mean = step.mean(model, x, embeds, pooled)
    model.disable_adapters()
    mean_ref = step.mean(model, x, embeds, pooled)
    model.enable_adapters()
    advantages = torch.tensor(rows.advantage.to_numpy())
    log_prob = step.log_likelihood(next_x, mean, step.scale)
    ratio = torch.exp(log_prob - old)
    if guard:  # GRPO-Guard (Flow-Factory): exp((logp - logp_old) s + mean((mu - mu_old)^2) / (2 s))
        s = step.scale
        ratio = torch.exp((log_prob - old) * s + ((mean - recorded("means").double()) ** 2).mean(dim=(1, 2, 3)) / (2 * s))
    policy_loss = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
    kl = (((mean - mean_ref) ** 2).mean(dim=(1, 2, 3)) / (2 * step.std**2)).mean()
    with torch.no_grad():
        got, logs = objective.loss(trainer.policy, data, (index, 0))
    assert kl.item() > 0 and (ratio - 1).abs().max() > 1e-4  # the LoRA moved
    assert logs["train/policy_loss"] == pytest.approx(policy_loss.item(), abs=1e-5)
    assert logs["train/kl_loss"] == pytest.approx(kl.item(), rel=1e-3)
    assert got.item() == pytest.approx((policy_loss + 0.5 * kl).item(), abs=1e-5)
    assert logs["train/ratio_mean"] == pytest.approx(float(ratio.mean()), rel=1e-5)
    assert logs["train/log_prob_mean_abs_diff"] == pytest.approx(float((log_prob - old).abs().mean()), rel=1e-3)
    if step.flow is FLUX_DEV:  # the recorded guidance is what is re-scored: at 1 the means differ
        with torch.no_grad():
            v1 = flux_velocity(model, x, step.sigma, embeds, pooled, guidance=1.0)
        assert (step.transition_mean(v1, x) - mean).abs().max() > 1e-4


# --- DiffusionNFT and AWM: the clean-latent objectives ------------------------------------------------

def clean_config(flow, loss: str, overrides: dict | None = None, **options):
    return flux_config(flow, "configs/tiny_sd3_grpo.yaml", loss, overrides, batch_size=4, learning_rate=3e-3,
                       gradient_accumulation_steps=1, **{loss: options})


# DGPO's groups of 2 over the 4 steps of the rollouts: its M = 4 timesteps are all of them (as test_dgpo.py)
CLEAN_LATENT_OPTIONS = {"nft": ({}, {}), "awm": ({}, {}),
                        "dgpo": ({"generate": {"images_per_prompt": 2}}, {"trunc_steps": 3})}


@pytest.mark.parametrize("direction", [1, -1])
@pytest.mark.parametrize("loss, flow", [("nft", FLUX_DEV), ("nft", FLUX_SCHNELL), ("awm", FLUX_DEV),
                                        ("dgpo", FLUX_DEV), ("dgpo", FLUX_SCHNELL)],
                         ids=["nft-dev", "nft-schnell", "awm-dev", "dgpo-dev", "dgpo-schnell"])
def test_clean_latent_objectives_on_flux_lower_the_error_of_high_advantage_images(tmp_path, loss, flow, direction):
    """Held-out images of the positive-advantage style become easier to generate (the flow-matching error of the
    hand-written FLUX call, at the rollouts' guidance); flipped advantages, the other style."""
    overrides, options = CLEAN_LATENT_OPTIONS[loss]
    model = train(clean_config(flow, loss, overrides, inner_epochs=2, **options), flow.denoiser(),
                  nft_inputs(direction, 20, flow), flow.model_info(), tmp_path)
    moved = held_out_flow_matching_shift(model, flow)
    assert moved * direction < 0, moved


def test_nft_loss_on_flux_equals_the_reference_code_on_a_micro_batch(tmp_path):
    """DiffusionNFT's loss (NVlabs train_nft_sd3.py, objective_checks.reference_nft_loss) on FLUX.1-dev with the
    velocities of the hand-written pipeline call at the rollouts' guidance 3.5 (dev predicts at it: no CFG pass
    to leave out), an old policy between base and current, and the KL to the reference. rel 1e-4."""
    inputs = nft_inputs(1, 20, FLUX_DEV)
    inputs.signal["advantage"] = [1.5, -0.5, 0.2, -1.0, 2.0, -2.0, 0.7, -0.9] * 2
    cfg = clean_config(FLUX_DEV, "nft", beta=0.5, kl_beta=300.0)
    objective, trainer, data, _ = trained(cfg, FLUX_DEV.denoiser(), inputs, FLUX_DEV.model_info(), tmp_path)
    assert data.guidance_scale == 3.5
    policy = trainer.policy
    policy.extra["old"] = [p.detach() * 0.5 for p in policy.trainable]
    index, grid_index, noise_seed = objective.plan(data, 1)[1][0]
    rows, x0, embeds, pooled = clean_latent_micro_batch(inputs, index)
    sigma = inputs.tensors["rollout/sigmas"][grid_index]
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(noise_seed))
    x_t = (1 - sigma.view(-1, 1, 1, 1)) * x0 + sigma.view(-1, 1, 1, 1) * noise
    v, v_ref, v_old = three_velocities(policy, x_t, sigma, embeds, pooled, "old", FLUX_DEV)
    with torch.no_grad():
        got, logs = objective.loss(policy, data, (index, grid_index, noise_seed))
    expected = reference_nft_loss(*[a.double().numpy() for a in (v, v_old, x_t, x0, sigma)],
                                  rows.advantage.to_numpy(), 0.5, 5.0)
    kl = float(((v - v_ref) ** 2).mean())
    assert (v - v_old).abs().max() > 1e-4 and kl > 0
    assert logs["train/policy_loss"] == pytest.approx(expected, rel=1e-4)
    assert logs["train/kl_loss"] == pytest.approx(kl, rel=1e-4)
    assert got.item() - logs["train/policy_loss"] == pytest.approx(300.0 * kl, rel=1e-3)
    assert logs["train/old_deviate"] == pytest.approx(float(((v - v_old) ** 2).mean()), rel=1e-4)


@pytest.mark.parametrize("flow", [FLUX_DEV, FLUX_SCHNELL], ids=["dev", "schnell"])
def test_awm_loss_on_flux_equals_flow_factorys_on_a_micro_batch(tmp_path, flow):
    """AWM (Flow-Factory trainers/awm.py) on FLUX: the matching error, the KL to the reference and to the EMA from
    the hand-written pipeline call (dev at the rollouts' 3.5, schnell without guidance), and the gradient of
    -mean(A log p), log p = -t mean((v - (eps - x0))^2). rel 1e-4 on the terms, 1e-3 on the gradient."""
    inputs = nft_inputs(1, 20, flow)
    inputs.signal["advantage"] = [1.5, -0.5, 0.2, -1.0, 2.0, -7.0, 0.7, -0.9] * 2  # -7 is clipped to -5
    cfg = clean_config(flow, "awm", weighting="t", kl_beta=300.0, ema_kl_beta=50.0, skip_first=False)
    objective, trainer, data, _ = trained(cfg, flow.denoiser(), inputs, flow.model_info(), tmp_path)
    policy, model = trainer.policy, trainer.model
    policy.extra["ema"] = [p.detach() * 0.5 for p in policy.trainable]
    index, grid_index, noise_seed = objective.plan(data, 1)[1][0]
    rows, x0, embeds, pooled = clean_latent_micro_batch(inputs, index)
    sigma = float(inputs.tensors["rollout/sigmas"][grid_index])
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(noise_seed))
    x_t = (1 - sigma) * x0 + sigma * noise
    v, v_ref, v_ema = three_velocities(policy, x_t, sigma, embeds, pooled, "ema", flow)
    with torch.no_grad():
        got, logs = objective.loss(policy, data, (index, grid_index, noise_seed))
    advantages = rows.advantage.clip(-5, 5).to_numpy()
    kl, ema_kl = float(((v - v_ref) ** 2).mean()), float(((v - v_ema) ** 2).mean())
    assert kl > 0 and ema_kl > 0
    assert logs["train/policy_loss"] == pytest.approx(float(-advantages.mean()), rel=1e-6)
    assert logs["train/matching_loss"] == pytest.approx(float(((v - (noise - x0).double()) ** 2).mean()), rel=1e-4)
    assert logs["train/kl_loss"] == pytest.approx(kl, rel=1e-4)
    assert logs["train/ema_kl_loss"] == pytest.approx(ema_kl, rel=1e-4)
    assert got.item() == pytest.approx(float(-advantages.mean()) + 300.0 * kl + 50.0 * ema_kl, rel=1e-4)
    policy.model.zero_grad()
    objective.options = dataclasses.replace(objective.options, kl_beta=0.0, ema_kl_beta=0.0)
    objective.loss(policy, data, (index, grid_index, noise_seed))[0].backward()
    got_grad = [p.grad.clone() for p in policy.trainable]
    policy.model.zero_grad()
    v_grad = flow.velocity(model, x_t, sigma, embeds, pooled)
    log_p = -sigma * ((v_grad - (noise - x0).double()) ** 2).mean(dim=(1, 2, 3))
    (-(torch.tensor(advantages) * log_p).mean()).backward()
    for mine, theirs in zip(got_grad, policy.trainable):
        torch.testing.assert_close(mine, theirs.grad.to(mine.dtype), rtol=1e-3, atol=1e-7)


# --- DPO and SFT: the flow-matching loss on pairs --------------------------------------------------

def flux_pair_inputs(flow, chosen, rejected, seed: int) -> TrainingInputs:
    pooled = torch.randn(len(chosen), flow.pooled_width, generator=torch.Generator().manual_seed(seed + 1))
    inputs = pair_inputs(chosen, rejected, prompt_embeds(len(chosen), flow.text_width, seed=seed), pooled)
    inputs.tensors["rollout/guidance_scale"] = torch.tensor(flow.guidance)  # the pairs' rollouts' scale
    return inputs


def pair_config(flow, loss: str, **train):
    return flux_config(flow, "configs/tiny_sd3_grpo.yaml", loss, batch_size=4, learning_rate=3e-3,
                       gradient_accumulation_steps=1, **train)


@pytest.mark.parametrize("direction", [1, -1])
@pytest.mark.parametrize("loss, options", [("dpo", {"dpo": {"beta": 500.0}}), ("sft", {})])
def test_pair_objectives_on_flux_move_towards_the_chosen_images(tmp_path, loss, options, direction):
    shape = FLUX_DEV.latent
    train_good, train_bad = style_latents(GOOD, 24, shape, seed=1), style_latents(BAD, 24, shape, seed=2)
    chosen, rejected = (train_good, train_bad) if direction == 1 else (train_bad, train_good)
    model = train(pair_config(FLUX_DEV, loss, steps=30, **options), FLUX_DEV.denoiser(),
                  flux_pair_inputs(FLUX_DEV, chosen, rejected, seed=3), FLUX_DEV.model_info(), tmp_path)
    # measured at the rollouts' guidance (3.5), where the pair objectives train on dev (see the DPO formula test)
    moved = held_out_flow_matching_shift(model, FLUX_DEV)
    assert moved * direction < 0, moved




@pytest.mark.parametrize("flow", [FLUX_DEV, FLUX_SCHNELL], ids=["dev", "schnell"])
@pytest.mark.parametrize("loss", ["dpo", "sft"])
def test_pair_losses_on_flux_equal_a_hand_computation_with_packing(tmp_path, loss, flow):
    """Diffusion-DPO (flow_grpo train_sd3_dpo.py's flow-matching form) and SFT on FLUX: index int(u x 1000),
    u ~ logit-normal, into FLUX's training grid, which is unshifted (dev's config shifts dynamically at
    sampling only, schnell's shift is 1: sigma = (1000 - i) / 1000, as diffusers' train_dreambooth_lora_flux.py
    reads it off the same scheduler); x_t = (1 - sigma) x0 + sigma eps; the velocity of the hand-written pipeline
    call (packing, position ids, t / 1000, guidance embedding on dev) against eps - x0. rel 1e-4."""
    shape = flow.latent
    inputs = flux_pair_inputs(flow, style_latents(GOOD, 8, shape, seed=1), style_latents(BAD, 8, shape, seed=2), seed=3)
    objective, trainer, data, _ = trained(pair_config(flow, loss, steps=3, dpo={"beta": 500.0}), flow.denoiser(),
                                          inputs, flow.model_info(), tmp_path)
    batch = objective.micro_batch(data, 1, 0)
    assert batch.timesteps.dtype == torch.long and (batch.timesteps < 1000).all()
    sigma = ((1000 - batch.timesteps.double()) / 1000).view(-1, 1, 1, 1)
    t = inputs.tensors
    rows = inputs.signal.iloc[batch.index.numpy()]
    w = torch.stack([t[f"latents/{c}"] for c in rows.chosen]).double()
    l_ = torch.stack([t[f"latents/{r}"] for r in rows.rejected]).double()
    embeds = torch.stack([t[f"prompt_embeds/{p}"] for p in rows.prompt_id])
    pooled = torch.stack([t[f"pooled_embeds/{p}"] for p in rows.prompt_id])
    noise = batch.noise.double()
    model = trainer.model

    def errors(x0):
        x_t = ((1 - sigma) * x0 + sigma * noise).float()
        # FLUX.1-dev trains at its rollouts' guidance embedding (3.5); schnell has no guidance input
        v = flux_velocity(model, x_t, sigma.flatten().float(), embeds, pooled, guidance=flow.guidance)
        return ((v - (noise - x0)) ** 2).mean(dim=(1, 2, 3))

    with torch.no_grad():
        policy_w, policy_l = errors(w), errors(l_)
        model.disable_adapters()
        ref_w, ref_l = errors(w), errors(l_)
        model.enable_adapters()
        got, logs = objective.loss(trainer.policy, data, (1, 0))
    assert (policy_w - ref_w).abs().max() > 1e-6  # the LoRA moved
    if loss == "dpo":
        inside = -0.5 * 500.0 * ((policy_w - policy_l) - (ref_w - ref_l))
        expected = -F.logsigmoid(inside).mean()
        assert logs["train/implicit_acc"] == pytest.approx(float((inside > 0).double().mean()))
    else:
        expected = policy_w.mean()
    assert got.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)


# --- Flow-GRPO-Fast: a real rollout of the tiny FLUX.1-dev pipeline with an SDE window ---------------

@pytest.fixture(scope="module")
def dev_pipe():
    from rewardloop.models.tiny.flux import build_tiny_flux_pipeline

    return build_tiny_flux_pipeline(seed=0)


def flux_rollout(pipe, sde_cfg: dict | None, steps: int = 4, guidance: float = 3.5):
    """generate's rollout (rewardloop.stages.common.rollout) on the tiny FLUX: 2 prompts x 2 seeds at 32 px, the
    SDE steps of ``sde_cfg``'s strategy recorded; advantages +-1 per group."""
    from rewardloop.sampling.ddim import SamplerSettings
    from rewardloop.sampling.step_strategies import select_sde_steps
    from rewardloop.stages.common import SDEPlan, rollout

    prompts = pd.DataFrame({"prompt_id": ["p0", "p1"], "prompt": ["a red circle", "a green square on blue"]})
    seeds = [[3, 4], [11, 12]]
    settings = SamplerSettings(steps=steps, guidance_scale=guidance, eta=0.0, resolution=32)
    sde = None
    if sde_cfg is not None:
        sde = SDEPlan(0.7, select_sde_steps(sde_cfg, steps, [s for row in seeds for s in row], 0), "flow_grpo")
    rows, latents, tensors = rollout(pipe, FLUX, prompts, seeds, settings, batch_size=4, id_prefix="i000",
                                     progress=False, sde=sde)
    tensors.update({f"latents/{sid}": lat for sid, lat in zip(rows.sample_id, latents)})
    table = rows[["sample_id", "prompt_id"]].assign(advantage=[1.0, -1.0, -1.0, 1.0])
    return TrainingInputs(table, tensors, "advantages.parquet", "latents.safetensors"), sde


def test_flow_grpo_fast_on_a_real_flux_rollout_rescores_and_trains(dev_pipe, tmp_path):
    """Flow-GRPO-Fast's window (sde_window, 2 SDE steps in [0, 2) of 4) on the tiny FLUX.1-dev at guidance 3.5:
    the recorded transitions re-score, through GRPO's load and loss with the untrained LoRA, to the recorded
    log-probs (the generate and train paths call the transformer alike: 1e-5), each step's timestep is its sigma
    x 1000, and an iteration trains (finite losses, the LoRA moves)."""
    window = {"strategy": "sde_window", "num_sde_steps": 2, "window_range": [0, 2]}
    inputs, sde = flux_rollout(dev_pipe, window)
    assert sde[1] == [[0, 1]] * 4 and float(inputs.tensors["rollout/guidance_scale"]) == 3.5
    cfg = config("configs/tiny_sd3_grpo_fast.yaml", FLUX_DEV.overrides(), loss="grpo", batch_size=2,
                 learning_rate=3e-3, gradient_accumulation_steps=1, grpo={"inner_epochs": 1, "clip_range": 0.2},
                 **FLUX_DEV.train_options())
    model_info = FLUX_DEV.model_info()
    untrained = get_objective("grpo").from_config({**cfg, "seed": 0}, 0)
    policy = Trainer(untrained.train, copy.deepcopy(dev_pipe.transformer), 0, 0).policy
    data = untrained.load(inputs, model_info)
    assert data.recorded_steps == 2 and data.guidance_scale == 3.5
    timesteps = torch.stack([inputs.tensors[f"trajectory/{s}/timesteps"] for s in inputs.signal.sample_id])
    torch.testing.assert_close(data.steps.timestep(data.params, 1000), timesteps)  # what generate fed the transformer
    for k in range(2):
        with torch.no_grad():
            _, logs = untrained.loss(policy, data, (torch.arange(4), k))
        assert logs["train/log_prob_mean_abs_diff"] < 1e-5, k
    _, trainer, _, history = trained(cfg, copy.deepcopy(dev_pipe.transformer), inputs, model_info, tmp_path)
    assert len(history) == 2 and all(math.isfinite(h["train/loss"]) for h in history)
    lora_b = [p for n, p in trainer.model.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().max() > 0 for p in lora_b)  # peft starts B at 0: it moved


def test_nft_and_awm_on_a_real_flux_dev_rollout_train_at_its_guidance(dev_pipe):
    """The clean-latent objectives predict at the rollout's guidance on a guidance-embedding family
    (clean_latents.py; ModelFamily.cfg_free_scale): the plain ODE rollouts NFT and AWM train on record the scale
    they sampled at (rollout/guidance_scale), which load_clean_latents reads."""
    from rewardloop.objectives.clean_latents import load_clean_latents

    inputs, _ = flux_rollout(dev_pipe, None, steps=2)
    assert load_clean_latents(inputs, FLUX).guidance_scale == 3.5
