"""The samplers' log-probabilities and the objectives' losses against independent references.

Every expected value here is computed from the papers' formulas (objective_checks.py) or by
diffusers' own scheduler, with direct calls of the tiny random-init denoisers, never with the
project's helpers: the rollout's recorded steps are replayed step by step, and each objective's
``loss`` on a micro-batch is recomputed from the stage's raw tensors.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from objective_checks import (alphas_cumprod, clean_latent_micro_batch, config, cps_log_likelihood,
                              cps_mean_reference, ddim_mean_reference, ddim_std_reference, flow_sde_mean,
                              flow_velocity, gaussian_log_likelihood, pair_inputs, prompt_embeds, sd15_model_info,
                              reference_nft_loss, sd15_scheduler_config, style_latents, three_velocities,
                              tiny_sd15_pipeline, tiny_sd3_pipeline, tiny_transformer, tiny_unet, trained)
from objective_inputs import CPSStep, DDIMStep, FlowStep, rollout_inputs
from rewardloop.models.families import get_family
from rewardloop.objectives.preference import HELD_STREAM
from rewardloop.sampling.ddim import SamplerSettings
from rewardloop.sampling.ddim_logprob import ddim_mean, ddim_std, sample_ddim_recorded, step_alphas
from rewardloop.sampling.flow import sample_flow
from rewardloop.sampling.sde import gaussian_log_prob



# --- DDIM with eta (Song et al. 2021) ---------------------------------------------------------

@pytest.mark.parametrize("eta", [0.3, 1.0])
@pytest.mark.parametrize("final_alpha_one", [False, True], ids=["sd15", "alpha-one-offset-0"])
def test_ddim_step_equals_the_paper_and_diffusers_scheduler(eta, final_alpha_one):
    """SD1.5's schedule, and one whose last step lands exactly on t = 0 with a final alpha of 1."""
    from diffusers import DDIMScheduler

    overrides = {"set_alpha_to_one": True, "steps_offset": 0} if final_alpha_one else {}
    scheduler = DDIMScheduler(**{**sd15_scheduler_config(), **overrides})
    steps = 4
    scheduler.set_timesteps(steps)
    a = alphas_cumprod()
    final = 1.0 if final_alpha_one else float(a[0])
    gen = torch.Generator().manual_seed(0)
    for t in (int(t) for t in scheduler.timesteps):
        a_t, a_prev = step_alphas(scheduler, t, steps)
        prev = t - 1000 // steps
        assert a_t == pytest.approx(float(a[t]), rel=1e-6)
        # past t = 0: alphas_cumprod[0] (set_alpha_to_one: false, SD1.5) or 1
        assert a_prev == pytest.approx(float(a[prev]) if prev >= 0 else final, rel=1e-6)
        std = ddim_std(a_t, a_prev, eta)
        assert std == pytest.approx(ddim_std_reference(a_t, a_prev, eta), rel=1e-9)
        eps, x, noise = (torch.randn(2, 4, 8, 8, generator=gen) for _ in range(3))
        mean = ddim_mean(eps, x, a_t, a_prev, std)
        assert torch.allclose(mean.double(), ddim_mean_reference(eps, x, a_t, a_prev, std), atol=1e-5)
        stepped = scheduler.step(eps, t, x, eta=eta, variance_noise=noise).prev_sample
        assert torch.allclose(mean + std * noise, stepped, atol=1e-5)


def test_gaussian_log_prob_is_the_normal_density_averaged_over_dimensions():
    gen = torch.Generator().manual_seed(0)
    x, mean = torch.randn(3, 2, 4, 4, generator=gen), torch.randn(3, 2, 4, 4, generator=gen)
    scale = torch.tensor([0.2, 1.0, 3.0])
    expected = torch.distributions.Normal(mean, scale.view(3, 1, 1, 1)).log_prob(x).mean(dim=(1, 2, 3))
    assert torch.allclose(gaussian_log_prob(x, mean, scale), expected, atol=1e-5)


# --- the recorded rollouts, replayed step by step ---------------------------------------------

def step_noises(seed: int, steps: int, shape) -> list[torch.Tensor]:
    """The per-step noise of a sample: one draw per step from a generator seeded with seed + 1 (the contract)."""
    gen = torch.Generator().manual_seed(seed + 1)
    return [torch.randn(shape, generator=gen) for _ in range(steps)]


def check_replay(records, sde_steps, seeds, final, shape, steps, step_fn, log_likelihood=gaussian_log_likelihood):
    """Replay each sample: ``step_fn(x, j, i) -> (mean, scale of a stochastic step, record constants)``."""
    for i, seed in enumerate(seeds):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))[None]
        noises, k = step_noises(seed, steps, shape), 0
        for j in range(steps):
            mean, scale, constants = step_fn(x, j, i)
            if j in sde_steps[i]:
                record = {key: value[k] for key, value in records[i].items()}
                assert torch.allclose(record["latents"], x[0].float(), atol=1e-5)
                next_x = mean + scale * noises[j].double()
                if "means" in record:  # flow rollouts record the transition's mean (GRPO-Guard's mu_old)
                    assert torch.allclose(record["means"].double(), mean[0], atol=1e-4)
                assert torch.allclose(record["next_latents"].double(), next_x[0], atol=1e-4)
                expected = log_likelihood(record["next_latents"][None], mean, scale)
                assert record["log_probs"].item() == pytest.approx(expected.item(), abs=1e-4)
                for key, value in constants.items():
                    assert record[key].item() == pytest.approx(value, rel=1e-5), key
                x, k = record["next_latents"][None].double(), k + 1
            else:
                x = mean
        assert k == len(sde_steps[i]) and (k == 0) == (records[i] is None)
        assert torch.allclose(final[i].double(), x[0], atol=1e-4)


@torch.no_grad()
def test_ddim_rollouts_record_the_papers_transitions(tmp_path):
    """sample_ddim_recorded (SD1.5 GRPO): eta steps and their log-probs from DDIM's formulas, CFG as in
    diffusers (uncond + g (cond - uncond)), the other steps deterministic DDIM."""
    pipe = tiny_sd15_pipeline(tmp_path)
    prompts, seeds, sde_steps, eta = ["a red circle", "a blue square", "two dots"], [3, 11, 29], [[1, 2], [0], []], 1.0
    settings = SamplerSettings(steps=4, guidance_scale=3.0, eta=0.0, resolution=32)
    cond = pipe.encode_prompt(prompts, "cpu", 1, False)[0]
    uncond = pipe.encode_prompt([""], "cpu", 1, False)[0]
    final, records = sample_ddim_recorded(pipe, get_family("sd15"), cond, seeds, settings, 2, sde_steps, eta,
                                          progress=False)
    pipe.scheduler.set_timesteps(4)
    timesteps = [int(t) for t in pipe.scheduler.timesteps]
    a = alphas_cumprod()

    def step(x, j, i):
        t = timesteps[j]
        a_t = float(a[t])
        a_prev = float(a[t - 250]) if t >= 250 else float(a[0])
        e_uncond = pipe.unet(x.float(), t, encoder_hidden_states=uncond).sample.double()
        e_text = pipe.unet(x.float(), t, encoder_hidden_states=cond[i: i + 1]).sample.double()
        eps = e_uncond + 3.0 * (e_text - e_uncond)
        std = ddim_std_reference(a_t, a_prev, eta) if j in sde_steps[i] else 0.0
        return ddim_mean_reference(eps, x, a_t, a_prev, std), std, {
            "timesteps": t, "alphas": a_t, "alphas_prev": a_prev, "std": std}

    check_replay(records, sde_steps, seeds, final, (4, 8, 8), 4, step)


SD3_PROMPTS, SD3_SEEDS, SD3_SDE_STEPS, SD3_LEVEL = ["a red circle", "a blue square", "two dots"], [5, 17, 40], \
    [[0, 1], [2], []], 0.7


def recorded_sd3_rollouts(tmp_path, sde_type: str):
    """4-step CFG rollouts of the tiny SD3 with the recorded steps of ``sde_type``: (final, records, the
    grid's sigmas, v(x, j, i) = the guided velocity of sample i at step j computed here)."""
    pipe = tiny_sd3_pipeline(tmp_path)
    settings = SamplerSettings(steps=4, guidance_scale=2.5, eta=0.0, resolution=32)
    cond, _, pooled, _ = pipe.encode_prompt(SD3_PROMPTS, None, None, device="cpu", do_classifier_free_guidance=False,
                                            max_sequence_length=0)
    uncond, _, uncond_pooled, _ = pipe.encode_prompt([""], None, None, device="cpu", do_classifier_free_guidance=False,
                                                     max_sequence_length=0)
    final, records = sample_flow(pipe, get_family("sd3"), {"prompt_embeds": cond, "pooled_embeds": pooled}, SD3_SEEDS,
                                 settings, 2, SD3_SDE_STEPS, SD3_LEVEL,
                                 progress=False, sde_type=sde_type)
    pipe.scheduler.set_timesteps(4)
    sigmas = [float(s) for s in pipe.scheduler.sigmas]

    def guided(x, j, i):
        v_uncond = flow_velocity(pipe.transformer, x.float(), sigmas[j], uncond, uncond_pooled)
        v_text = flow_velocity(pipe.transformer, x.float(), sigmas[j], cond[i: i + 1], pooled[i: i + 1])
        return v_uncond + 2.5 * (v_text - v_uncond)

    return final, records, sigmas, guided


@torch.no_grad()
def test_flow_sde_rollouts_record_the_papers_transitions(tmp_path):
    """sample_flow with SDE steps (Flow-GRPO): the paper's mean, std_t = a sqrt(s / (1 - s)) (flow_grpo's
    sde_step_with_logprob: 1 - sigmas[1] below the fraction at s = 1), scale std_t sqrt(-dt), CFG on the
    velocity, Euler steps elsewhere; sigmas from diffusers' scheduler."""
    final, records, sigmas, guided = recorded_sd3_rollouts(tmp_path, "flow_grpo")

    def step(x, j, i):
        sigma, sigma_next = sigmas[j], sigmas[j + 1]
        denominator = 1 - (sigma if sigma < 1 else sigmas[1])  # flow_grpo: sigma_max = sigmas[1] at sigma = 1
        std = SD3_LEVEL * math.sqrt(sigma / denominator) if j in SD3_SDE_STEPS[i] else 0.0
        return flow_sde_mean(guided(x, j, i), x, sigma, sigma_next, std), std * math.sqrt(sigma - sigma_next), {
            "sigmas": sigma, "sigmas_next": sigma_next, "std": std, "timesteps": sigma * 1000}

    check_replay(records, SD3_SDE_STEPS, SD3_SEEDS, final, (16, 8, 8), 4, step)


@torch.no_grad()
def test_cps_rollouts_record_the_papers_transitions(tmp_path):
    """sample_flow with CPS steps (flow_grpo's sde_type cps): std = sigma_next sin(a pi / 2), the mean that
    keeps the interpolation's coefficients, fresh noise of that std, flow_grpo's log-prob -mean((x' - mean)^2);
    Euler steps elsewhere (CPS with std 0 is the Euler step)."""
    final, records, sigmas, guided = recorded_sd3_rollouts(tmp_path, "cps")

    def step(x, j, i):
        sigma, sigma_next = sigmas[j], sigmas[j + 1]
        v = guided(x, j, i)
        std = sigma_next * math.sin(SD3_LEVEL * math.pi / 2) if j in SD3_SDE_STEPS[i] else 0.0
        if std == 0.0:  # the Euler step
            assert torch.allclose(cps_mean_reference(v, x, sigma, sigma_next, 0.0), x.double() + (sigma_next - sigma) * v)
        return cps_mean_reference(v, x, sigma, sigma_next, std), std, {
            "sigmas": sigma, "sigmas_next": sigma_next, "std": std, "timesteps": sigma * 1000}

    check_replay(records, SD3_SDE_STEPS, SD3_SEEDS, final, (16, 8, 8), 4, step, log_likelihood=cps_log_likelihood)


def test_cps_preserves_the_interpolations_coefficients():
    """On the exact velocity of x = (1 - s) x0 + s eps (v = eps - x0), a CPS step lands on (1 - s') x0 plus noise
    of total variance s'^2: sqrt(s'^2 - std^2) of eps and std of fresh noise (Wang & Yu 2025, eq. 7)."""
    from rewardloop.sampling.sde import cps_std, get_dynamics

    gen = torch.Generator().manual_seed(0)
    x0, eps, fresh = (torch.randn(2, 4, 8, 8, generator=gen) for _ in range(3))
    sigmas = torch.tensor([0.9, 0.6, 0.0])
    std = cps_std(sigmas, 0, 0.7)
    assert std == pytest.approx(0.6 * math.sin(0.7 * math.pi / 2))
    cps = get_dynamics("cps")
    x_next, mean = cps.step(eps - x0, 0.1 * x0 + 0.9 * eps, 0.9, 0.6, std, fresh)
    expected = 0.4 * x0 + math.sqrt(0.6**2 - std**2) * eps + std * fresh
    torch.testing.assert_close(x_next, expected, rtol=1e-5, atol=1e-5)
    assert cps_std(sigmas, 1, 0.7) == 0.0  # into sigma 0: no noise
    torch.testing.assert_close(cps.log_prob(x_next, mean), -((std * fresh) ** 2).mean(dim=(1, 2, 3)))


# --- each objective's loss on a micro-batch, recomputed from the stage's raw tensors ------------

@pytest.mark.parametrize("augment", [{}, {"hflip": True, "proportion_empty_prompts": 0.5}], ids=["plain", "hflip-empty"])
@pytest.mark.parametrize("loss", ["dpo", "sft"])
def test_pair_losses_equal_the_papers_on_a_micro_batch(tmp_path, loss, augment):
    """Diffusion-DPO (Wallace et al. eq. 14 as DiffusionDPO's train.py) and SFT on a trained LoRA:
    chosen and rejected share noise, timestep, prompt (or the empty one) and flip."""
    inputs = pair_inputs(style_latents(0, 12, (4, 8, 8), 1), style_latents(1, 12, (4, 8, 8), 2),
                         prompt_embeds(12, 64, seed=3))
    empty = prompt_embeds(1, 64, seed=4)[0]
    inputs.tensors["empty_prompt/prompt_embeds"] = empty
    cfg = config("config.yaml", loss=loss, steps=3, batch_size=6, learning_rate=5e-3,
                 dpo={"beta": 500, "reference": "base"}, **augment)
    objective, trainer, data, _ = trained(cfg, tiny_unet(), inputs, sd15_model_info(), tmp_path)
    step, micro = 7, 1
    batch = objective.micro_batch(data, step, micro)
    if augment:
        assert batch.flip_mask.any() and batch.empty_mask.any() and not batch.empty_mask.all()
    rows = inputs.signal.iloc[batch.index.numpy()]

    def latents(ids):
        stacked = torch.stack([inputs.tensors[f"latents/{s}"] for s in ids])
        return torch.where(batch.flip_mask.view(-1, 1, 1, 1), stacked.flip(-1), stacked)

    cond = torch.stack([inputs.tensors[f"prompt_embeds/{p}"] for p in rows.prompt_id])
    cond = torch.where(batch.empty_mask.view(-1, 1, 1), empty, cond)
    a = alphas_cumprod()[batch.timesteps].view(-1, 1, 1, 1)
    model = trainer.model

    def errors(x0):
        noisy = (a.sqrt() * x0 + (1 - a).sqrt() * batch.noise).float()
        prediction = model(noisy, batch.timesteps, encoder_hidden_states=cond).sample
        return ((prediction - batch.noise) ** 2).mean(dim=(1, 2, 3)).double()

    with torch.no_grad():
        policy_w, policy_l = errors(latents(rows.chosen)), errors(latents(rows.rejected))
        model.disable_adapters()
        ref_w, ref_l = errors(latents(rows.chosen)), errors(latents(rows.rejected))
        model.enable_adapters()
        got, logs = objective.loss(trainer.policy, data, (step, micro))
    if loss == "dpo":
        inside = -0.5 * 500 * ((policy_w - policy_l) - (ref_w - ref_l))
        expected = -F.logsigmoid(inside).mean()
        assert logs["train/implicit_acc"] == pytest.approx(float((inside > 0).double().mean()))
        assert abs(expected.item() - math.log(2)) > 1e-3  # the trained LoRA is not the reference
    else:
        expected = policy_w.mean()
    assert got.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    assert logs["train/loss"] == pytest.approx(got.item())
    # evaluate() draws its batches from a stream apart from training's
    held = objective.loss(trainer.policy, data, (step, micro), stream=HELD_STREAM)[0]
    assert abs(held.item() - got.item()) > 1e-6


@pytest.mark.parametrize("step", [FlowStep(), CPSStep(), DDIMStep()], ids=["sd3-flow-sde", "sd3-cps", "sd15-ddim"])
def test_grpo_loss_equals_the_papers_on_a_micro_batch(tmp_path, step):
    """Flow-GRPO's clipped surrogate and KL (flow_grpo train_sd3.py) on recorded steps re-scored with CFG."""
    leans = [1, -1] * 4
    inputs = rollout_inputs(step, step.denoiser(), leans, [1.5, -0.5, 0.2, -1.0, 2.0, -2.0, 0.7, -0.9], seed=10)
    inputs.tensors["rollout/guidance_scale"] = torch.tensor(2.0)
    clip = 0.005
    cfg = step.config(clip_range=clip, kl_beta=0.5)
    objective, trainer, data, _ = trained(cfg, step.denoiser(), inputs, step.model_info(), tmp_path)
    index = torch.tensor([5, 0, 3, 6])
    rows = inputs.signal.iloc[index.numpy()]
    t = inputs.tensors

    def recorded(name):
        return torch.stack([t[f"trajectory/{s}/{name}"][0] for s in rows.sample_id])

    x, next_x, old = recorded("latents"), recorded("next_latents"), recorded("log_probs").double()
    embeds = torch.stack([t[f"prompt_embeds/{p}"] for p in rows.prompt_id])
    pooled = step.pooled(t, rows.prompt_id)
    uncond = (t["empty_prompt/prompt_embeds"][None],
              t["empty_prompt/pooled_embeds"][None] if step.family == "sd3" else None)
    model = trainer.model
    mean = step.mean(model, x, embeds, pooled, uncond, 2.0)
    model.disable_adapters()
    mean_ref = step.mean(model, x, embeds, pooled, uncond, 2.0)
    model.enable_adapters()
    advantages = torch.tensor(rows.advantage.to_numpy())
    log_prob = step.log_likelihood(next_x, mean, step.scale)
    ratio = torch.exp(log_prob - old)
    policy_loss = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
    kl = (((mean - mean_ref) ** 2).mean(dim=(1, 2, 3)) / (2 * step.std**2)).mean()
    with torch.no_grad():
        got, logs = objective.loss(trainer.policy, data, (index, 0))
    assert kl.item() > 0 and ((ratio - 1).abs() > clip).any()  # the LoRA moved: both terms are exercised
    assert logs["train/policy_loss"] == pytest.approx(policy_loss.item(), abs=1e-5)
    assert logs["train/kl_loss"] == pytest.approx(kl.item(), rel=1e-3)
    assert got.item() == pytest.approx((policy_loss + 0.5 * kl).item(), abs=1e-5)
    assert logs["train/clipfrac"] == pytest.approx(float(((ratio - 1).abs() > clip).double().mean()))
    assert logs["train/approx_kl"] == pytest.approx(float(0.5 * ((log_prob - old) ** 2).mean()), rel=1e-3, abs=1e-9)
    assert logs["train/log_prob_mean_abs_diff"] == pytest.approx(float((log_prob - old).abs().mean()), rel=1e-3)
    assert logs["train/ratio_mean"] == pytest.approx(float(ratio.mean()), rel=1e-5)
    objective.options = dataclasses.replace(objective.options, kl_beta=0.0)
    with torch.no_grad():
        got, logs = objective.loss(trainer.policy, data, (index, 0))
    assert logs["train/kl_loss"] == 0 and got.item() == pytest.approx(policy_loss.item(), abs=1e-5)


def test_nft_loss_equals_the_reference_code_on_a_micro_batch(tmp_path):
    """DiffusionNFT's loss (NVlabs train_nft_sd3.py) on a micro-batch of the plan, with an old policy that
    differs from the trained one and the KL to the reference (the LoRA disabled)."""
    from objective_inputs import nft_inputs

    inputs = nft_inputs(1, seed=20)
    inputs.signal["advantage"] = [1.5, -0.5, 0.2, -1.0, 2.0, -2.0, 0.7, -0.9] * 2
    cfg = config("configs/tiny_sd3_grpo.yaml", loss="nft", batch_size=4, learning_rate=3e-3,
                 gradient_accumulation_steps=1, nft={"beta": 0.5, "kl_beta": 300.0})
    objective, trainer, data, _ = trained(cfg, tiny_transformer(), inputs, FlowStep().model_info(), tmp_path)
    policy = trainer.policy
    policy.extra["old"] = [p.detach() * 0.5 for p in policy.trainable]  # an old policy between base and current
    index, grid_index, noise_seed = objective.plan(data, 1)[1][0]
    rows, x0, embeds, pooled = clean_latent_micro_batch(inputs, index)
    t = inputs.tensors
    sigma = t["rollout/sigmas"][grid_index]  # the rollout's grid without its final 0
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(noise_seed))
    x_t = (1 - sigma.view(-1, 1, 1, 1)) * x0 + sigma.view(-1, 1, 1, 1) * noise
    v, v_ref, v_old = three_velocities(policy, x_t, sigma, embeds, pooled, "old")
    with torch.no_grad():
        got, logs = objective.loss(policy, data, (index, grid_index, noise_seed))
    as_numpy = [a.double().numpy() for a in (v, v_old, x_t, x0, sigma)]
    expected = reference_nft_loss(*as_numpy, rows.advantage.to_numpy(), 0.5, 5.0)
    kl = float(((v - v_ref) ** 2).mean())
    assert (v - v_old).abs().max() > 1e-4 and kl > 0
    assert logs["train/policy_loss"] == pytest.approx(expected, rel=1e-4)
    assert logs["train/kl_loss"] == pytest.approx(kl, rel=1e-4)
    assert got.item() - logs["train/policy_loss"] == pytest.approx(300.0 * kl, rel=1e-3)
    assert logs["train/old_deviate"] == pytest.approx(float(((v - v_old) ** 2).mean()), rel=1e-4)
    # The grid is the rollout's sigmas but the final 0: int(4 x 0.99) = 3 distinct points per sample, all 4 used.
    plan = objective.plan(data, 1)
    points = [g for update in plan for _, grid_index, _ in update for g in grid_index.tolist()]
    assert sorted(set(points)) == [0, 1, 2, 3] and len(points) == 16 * 3
    objective.options = dataclasses.replace(objective.options, kl_beta=0.0, timestep_fraction=0.3)
    assert sum(len(update) for update in objective.plan(data, 1)) == 4  # int(4 x 0.3) = 1 point per batch
    with torch.no_grad():
        got, logs = objective.loss(policy, data, (index, grid_index, noise_seed))
    assert logs["train/kl_loss"] == 0 and got.item() == pytest.approx(expected, rel=1e-4)


def test_pipeline_facts_the_samplers_read(tmp_path):
    from rewardloop.sampling import flow

    family = get_family("sd3")
    sd3 = tiny_sd3_pipeline(tmp_path / "sd3")
    assert family.t5_tokens(sd3) == 0  # no T5: no T5 tokens in the conditioning
    from transformers import T5Config, T5EncoderModel

    sd3.text_encoder_3 = T5EncoderModel(T5Config(vocab_size=32, d_model=8, d_kv=4, d_ff=16, num_layers=1,
                                                 num_heads=2))
    assert family.t5_tokens(sd3) == 256  # the SD3 pipeline's default max_sequence_length
    assert family.latent_shape(sd3, 32) == (16, 8, 8)
    with pytest.raises(ValueError, match=r"^generate\.resolution: 34 is not divisible by the VAE factor 4$"):
        family.latent_shape(sd3, 34)
    sigmas = flow.rollout_sigmas(sd3, family, sd3.scheduler, SamplerSettings(steps=4, guidance_scale=1.0, eta=0.0,
                                                                      resolution=32))
    assert sigmas.dtype == torch.float32 and len(sigmas) == 5 and sigmas[0] == 1 and sigmas[-1] == 0
