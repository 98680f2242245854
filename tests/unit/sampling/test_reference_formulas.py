"""The samplers' steps, log-probabilities and grids against independent references.

Every expected value here is computed from the papers' formulas (objective_checks.py) or by
diffusers' own scheduler and pipelines, with direct calls of the tiny random-init denoisers, never
with the project's helpers: the rollout's recorded steps are replayed step by step. (The objectives'
losses on a micro-batch, recomputed the same way: tests/unit/objectives/test_losses.py.)
"""

from __future__ import annotations

import math

import pytest
import torch

from objective_checks import (alphas_cumprod, cps_log_likelihood, cps_mean_reference, ddim_mean_reference,
                              ddim_std_reference, flow_sde_mean, flow_velocity, gaussian_log_likelihood,
                              sd15_scheduler_config, tiny_sd15_pipeline, tiny_sd3_pipeline)
from rewardloop.models.families import get_family
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


# --- a dynamically shifted flow grid follows the image's token count ----------------------------------------

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
