"""The synthetic training inputs of the objective tests, whose right direction is known, and their held-out
measures: recorded SDE steps (Flow-GRPO's flow SDE, CPS, DDIM with eta) whose transitions lean along or
against a fixed direction, clean latents of a good and a bad style with advantages, and what training on
them moved. Written with objective_checks.py's formulas, never with the project's helpers.
"""

from __future__ import annotations

import math

import torch

from objective_checks import (SD3, FlowModel, advantage_table, alphas_cumprod, conditioning_tensors, config,
                              cps_log_likelihood, cps_mean_reference, ddim_mean_reference, ddim_std_reference,
                              flow_sde_mean, gaussian_log_likelihood, prompt_embeds, sd15_model_info, style_latents,
                              tiny_unet)
from rewardloop.objectives.registry import TrainingInputs

SD15_LATENT, SD3_LATENT = (4, 8, 8), (16, 8, 8)
GOOD, BAD = 0, 1  # the two styles


# --- recorded SDE steps whose transitions lean along (+1) or against (-1) a fixed direction -----------

def biased_transitions(mean: torch.Tensor, scale, signs, seed: int) -> torch.Tensor:
    """next = mean + scale (z + sign * d): every + transition leans along the fixed direction d, every - against it."""
    d = torch.randn(mean.shape[1:], generator=torch.Generator().manual_seed(4242), dtype=torch.float64)
    z = torch.randn(mean.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    signs = torch.as_tensor(signs, dtype=torch.float64).view(-1, 1, 1, 1)
    return (mean + scale * (z + signs * d)).float()


class FlowStep:
    """One recorded SDE step of a 4-step shifted schedule, the means computed here, on the tiny denoiser of
    ``flow`` (objective_checks.FlowModel: the SD3 MMDiT by default, or FLUX.1-dev / schnell)."""

    sigma, sigma_next, noise_level = 0.9, 0.75, 0.7
    std = noise_level * math.sqrt(sigma / (1 - sigma))
    scale = std * math.sqrt(sigma - sigma_next)

    def __init__(self, flow: FlowModel = SD3):
        self.flow = flow
        self.family, self.latent_shape = flow.family, flow.latent
        # the rollouts' guidance: CFG off (1) where it is a second pass, the embedded scale on FLUX.1-dev
        self.guidance = flow.guidance

    def denoiser(self):
        return self.flow.denoiser()

    def conditioning(self, table, seed):
        return conditioning_tensors(table, self.flow.text_width, self.flow.pooled_width, seed)

    sde_type = 0  # rollout/sde_type: Flow-GRPO's SDE
    log_likelihood = staticmethod(gaussian_log_likelihood)

    def mean(self, model, x, embeds, pooled, uncond=None, guidance: float = 1.0):
        """The step's mean under ``model``; with ``uncond`` (embeds, pooled) classifier-free guided (a family
        whose guidance is embedded, FLUX, has no unconditional pass: its velocity reads the scale itself)."""
        with torch.no_grad():
            v = self.flow.velocity(model, x, self.sigma, embeds, pooled)
            if uncond is not None and self.family != "flux":
                n = len(x)
                v_uncond = self.flow.velocity(model, x, self.sigma, uncond[0].expand(n, -1, -1),
                                              uncond[1].expand(n, -1))
                v = v_uncond + guidance * (v - v_uncond)
        return self.transition_mean(v, x)

    def transition_mean(self, v, x):
        return flow_sde_mean(v, x, self.sigma, self.sigma_next, self.std)

    def params(self):
        return {"sigmas": self.sigma, "sigmas_next": self.sigma_next, "std": self.std}

    def model_info(self):
        return self.flow.model_info()

    def overrides(self) -> dict:
        return self.flow.overrides()

    def config(self, **grpo):
        return config("configs/tiny_sd3_grpo.yaml", self.overrides(), loss="grpo", batch_size=4, learning_rate=3e-3,
                      gradient_accumulation_steps=1, grpo={"inner_epochs": 3, **grpo}, **self.flow.train_options())

    def pooled(self, tensors, prompt_ids):
        return torch.stack([tensors[f"pooled_embeds/{p}"] for p in prompt_ids])


class MixGRPOStep(FlowStep):
    """The same recorded step trained by MixGRPO (configs/tiny_sd3_mixgrpo.yaml's objective and options: Flow-GRPO's
    SDE step in its window, its clip range 1e-4, no KL)."""

    def config(self, **mixgrpo):
        return config("configs/tiny_sd3_mixgrpo.yaml", self.overrides(), loss="mixgrpo", batch_size=4,
                      learning_rate=3e-3, gradient_accumulation_steps=1, mixgrpo={"inner_epochs": 3, **mixgrpo},
                      **self.flow.train_options())


class CPSStep(FlowStep):
    """The same step as CPS (generate.sde.type cps): std = sigma_next sin(a pi / 2), flow_grpo's log-prob."""

    std = FlowStep.sigma_next * math.sin(FlowStep.noise_level * math.pi / 2)
    scale = std
    sde_type = 1
    log_likelihood = staticmethod(cps_log_likelihood)

    def transition_mean(self, v, x):
        return cps_mean_reference(v, x, self.sigma, self.sigma_next, self.std)

    def overrides(self) -> dict:
        return {**super().overrides(), "generate": {"sde": {"type": "cps", "window_range": [0, 9], "num_sde_steps": 9}}}


class DDIMStep(FlowStep):
    """One recorded DDIM step (eta = 1) of a 4-step SD1.5 schedule (t = 501 -> 251)."""

    t, t_prev, eta = 501, 251, 1.0
    a_t, a_prev = float(alphas_cumprod()[501]), float(alphas_cumprod()[251])
    std = ddim_std_reference(a_t, a_prev, eta)
    scale = std

    def __init__(self):
        self.family, self.latent_shape, self.guidance = "sd15", SD15_LATENT, 1.0

    def denoiser(self):
        return tiny_unet()

    def conditioning(self, table, seed):
        return conditioning_tensors(table, 64, None, seed)

    def mean(self, model, x, embeds, pooled, uncond=None, guidance: float = 1.0):
        t = torch.full((len(x),), self.t)
        with torch.no_grad():
            eps = model(x, t, encoder_hidden_states=embeds).sample.double()
            if uncond is not None:
                e_uncond = model(x, t, encoder_hidden_states=uncond[0].expand(len(x), -1, -1)).sample.double()
                eps = e_uncond + guidance * (eps - e_uncond)
        return ddim_mean_reference(eps, x, self.a_t, self.a_prev, self.std)

    def params(self):
        return {"timesteps": float(self.t), "alphas": self.a_t, "alphas_prev": self.a_prev, "std": self.std}

    def model_info(self):
        return sd15_model_info()

    def config(self, **grpo):
        return config("config.yaml", {"generate": {"sde": {"noise_level": 1.0}}}, loss="grpo", batch_size=4,
                      learning_rate=3e-3, grpo={"inner_epochs": 3, **grpo})

    def pooled(self, tensors, prompt_ids):
        return None


def rollout_inputs(step, model, leans, advantages, seed: int) -> TrainingInputs:
    """advantages.parquet and the recorded steps of samples whose next latents lean along (+1) or against (-1) d."""
    table = advantage_table(advantages)
    tensors = step.conditioning(table, seed)
    x = style_latents(GOOD, len(leans), step.latent_shape, seed=seed + 2)
    embeds = torch.stack([tensors[f"prompt_embeds/{p}"] for p in table.prompt_id])
    mean = step.mean(model, x, embeds, step.pooled(tensors, table.prompt_id))
    next_x = biased_transitions(mean, step.scale, leans, seed + 3)
    old_log_prob = step.log_likelihood(next_x, mean, step.scale).float()
    for i, sid in enumerate(table.sample_id):
        record = {"latents": x[i], "next_latents": next_x[i], "log_probs": old_log_prob[i], "means": mean[i].float(),
                  **{k: torch.tensor(v, dtype=torch.float32) for k, v in step.params().items()}}
        tensors.update({f"trajectory/{sid}/{k}": v.unsqueeze(0) for k, v in record.items()})
    tensors["rollout/guidance_scale"] = torch.tensor(float(step.guidance))
    tensors["rollout/sde_type"] = torch.tensor(step.sde_type)
    return TrainingInputs(table, tensors, "advantages.parquet", "latents.safetensors")


def held_out_lean(step, base, trained) -> float:
    """Mean log-likelihood gain of held-out + transitions over - ones, trained vs base (> 0: towards +)."""
    leans = [1, -1] * 8
    inputs = rollout_inputs(step, base, leans, leans, seed=500)  # transitions drawn under the base model
    t = inputs.tensors
    ids, prompts = list(inputs.signal.sample_id), inputs.signal.prompt_id
    x = torch.stack([t[f"trajectory/{s}/latents"][0] for s in ids])
    next_x = torch.stack([t[f"trajectory/{s}/next_latents"][0] for s in ids])
    embeds = torch.stack([t[f"prompt_embeds/{p}"] for p in prompts])
    pooled = step.pooled(t, prompts)
    gains = (step.log_likelihood(next_x, step.mean(trained, x, embeds, pooled), step.scale)
             - step.log_likelihood(next_x, step.mean(base, x, embeds, pooled), step.scale))
    return float(gains[0::2].mean() - gains[1::2].mean())


# --- clean latents of the good and the bad style, with advantages (DiffusionNFT, AWM, DPO on SD3) ---------

@torch.no_grad()
def flow_matching_errors(model, x0, embeds, pooled, seed: int = 7, flow: FlowModel = SD3) -> torch.Tensor:
    """Per-sample rectified-flow error |v(x_t, t) - (eps - x0)|^2, x_t = (1 - t) x0 + t eps, at fixed t and eps."""
    gen = torch.Generator().manual_seed(seed)
    errors = []
    for t in (0.25, 0.5, 0.75, 0.9):
        eps = torch.randn(x0.shape, generator=gen)
        v = flow.velocity(model, (1 - t) * x0 + t * eps, t, embeds, pooled)
        errors.append(((v - (eps - x0).double()) ** 2).mean(dim=(1, 2, 3)))
    return torch.stack(errors).mean(0)


def nft_inputs(direction: int, seed: int, flow: FlowModel = SD3) -> TrainingInputs:
    """Final latents alternately of the good and the bad style, with advantages +-2 (x direction) in advantages.parquet.
    A family whose guidance is embedded (FLUX.1-dev) also has the rollouts' guidance scale, which it trains at."""
    styles = [GOOD, BAD] * 8
    table = advantage_table([2.0 * direction * (1 if style == GOOD else -1) for style in styles])
    tensors = conditioning_tensors(table, flow.text_width, flow.pooled_width, seed)
    good = style_latents(GOOD, len(styles), flow.latent, seed=seed + 1)
    bad = style_latents(BAD, len(styles), flow.latent, seed=seed + 2)
    for i, (sid, style) in enumerate(zip(table.sample_id, styles)):
        tensors[f"latents/{sid}"] = good[i] if style == GOOD else bad[i]
    tensors["rollout/sigmas"] = torch.tensor([1.0, 0.9, 0.75, 0.5, 0.0])
    if flow.guidance != 1.0:
        tensors["rollout/guidance_scale"] = torch.tensor(flow.guidance)
    return TrainingInputs(table, tensors, "advantages.parquet", "latents.safetensors")


def held_out_flow_matching_shift(trained, flow: FlowModel = SD3) -> float:
    """How much more the held-out good-style flow-matching error fell than the bad-style one, trained vs the
    untrained tiny denoiser of ``flow`` (< 0: towards the good style)."""
    base = flow.denoiser()
    embeds = prompt_embeds(16, flow.text_width, seed=80)
    pooled = torch.randn(16, flow.pooled_width, generator=torch.Generator().manual_seed(81))
    good, bad = style_latents(GOOD, 16, flow.latent, seed=82), style_latents(BAD, 16, flow.latent, seed=83)

    def errors(model, x0):
        return flow_matching_errors(model, x0, embeds, pooled, flow=flow)

    before, after = (errors(base, good), errors(base, bad)), (errors(trained, good), errors(trained, bad))
    return float((after[0] - before[0]).mean() - (after[1] - before[1]).mean())
