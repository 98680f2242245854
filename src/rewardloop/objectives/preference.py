"""What the pair objectives (dpo, sft) share: pairs as tensors, seeded micro-batches, denoising losses.

The generate stage cached every sample's final latents and every prompt's conditioning, so a
training step never runs the VAE or a text encoder. Each micro-batch (pairs, noise, timesteps,
empty-prompt and flip masks) is a pure function of (seed, iteration, step, micro).

On a DDPM-style family (a UNet: sd15, sdxl) the denoising loss is the ε (or v) MSE at a uniform timestep,
as DiffusionDPO trains. On a rectified-flow family (sd3, flux) it is the flow-matching loss, as
flow_grpo's ``scripts/train_sd3_dpo.py`` trains SD3.5: u ~ logit-normal(0, 1), the index
int(u * num_train_timesteps) into the shipped scheduler's (shifted) training grid gives sigma and
the timestep, x_t = (1 - sigma) x0 + sigma eps, target v = eps - x0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import numpy as np
from rewardloop.lazy_torch import no_grad, torch

from rewardloop.models.families import EMPTY_PROMPT, ModelFamily
from rewardloop.objectives.registry import Objective, ObjectiveError, TrainingInputs

if TYPE_CHECKING:
    from rewardloop.training.policy import Policy


@dataclass
class PairData:
    """Pairs as tensors: chosen/rejected latents [P, C, h, w] and their prompt embeddings [P, L, D].

    ``pooled``: SDXL's pooled embeddings [P, D2]; ``extra``: the family's other conditioning keys [P, ...]
    (Qwen-Image's prompt_embeds_mask); ``empty``: the empty prompt's conditioning
    (``train.proportion_empty_prompts``); the last ``offline`` pairs come from ``data.offline_pairs``.
    """

    chosen: torch.Tensor
    rejected: torch.Tensor
    embeds: torch.Tensor
    pooled: torch.Tensor | None = None
    empty: dict[str, torch.Tensor] | None = None
    offline: int = 0
    offline_fraction: float = 0.0  # share of each micro-batch drawn from the offline pairs
    guidance_scale: float = 1.0  # the rollouts' (rollout/guidance_scale; a guidance-embedding family trains at it)
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.chosen)

    @property
    def online(self) -> int:
        return len(self) - self.offline

    def conditioning(self, index: torch.Tensor, empty_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The conditioning rows of ``index``, with the empty prompt's where ``empty_mask`` is set."""
        cond = {"prompt_embeds": self.embeds[index]}
        if self.pooled is not None:
            cond["pooled_embeds"] = self.pooled[index]
        cond.update({key: value[index] for key, value in self.extra.items()})
        if empty_mask is not None and bool(empty_mask.any()):
            if self.empty is None:
                raise ObjectiveError("train.proportion_empty_prompts > 0 but the empty prompt's conditioning is not cached")
            for key, value in cond.items():
                cond[key] = torch.where(empty_mask.view(-1, *[1] * (value.ndim - 1)), self.empty[key], value)
        return cond


def load_pairs(inputs: TrainingInputs, conditioning: tuple[str, ...] = ("prompt_embeds",)) -> PairData:
    """pairs.parquet's rows (prompt_id, chosen, rejected) with their latents and conditioning (the family's keys,
    ``ModelFamily.conditioning``; SDXL's pooled embeddings are found by their key either way)."""
    pairs = inputs.rows(("prompt_id", "chosen", "rejected"), "no preference pairs (all groups tied?)")
    get = inputs.tensor
    has_pooled = any(k.startswith("pooled_embeds/") for k in inputs.tensors)
    empty = {k.split("/", 1)[1]: v for k, v in inputs.tensors.items() if k.startswith(f"{EMPTY_PROMPT}/")}
    extra = [key for key in conditioning if key not in ("prompt_embeds", "pooled_embeds")]  # e.g. Qwen-Image's mask
    return PairData(
        chosen=torch.stack([get(f"latents/{s}") for s in pairs.chosen]),
        rejected=torch.stack([get(f"latents/{s}") for s in pairs.rejected]),
        embeds=torch.stack([get(f"prompt_embeds/{p}") for p in pairs.prompt_id]),
        pooled=torch.stack([get(f"pooled_embeds/{p}") for p in pairs.prompt_id]) if has_pooled else None,
        empty=empty or None,
        guidance_scale=float(inputs.tensors.get("rollout/guidance_scale", 1.0)),
        extra={key: torch.stack([get(f"{key}/{p}") for p in pairs.prompt_id]) for key in extra},
    )


def concat_pairs(online: PairData, offline: PairData, offline_fraction: float) -> PairData:
    """Online pairs followed by offline ones (conditioning of the same family and size)."""
    if online.chosen.shape[1:] != offline.chosen.shape[1:]:
        raise ObjectiveError(
            f"data.offline_pairs: latents {tuple(offline.chosen.shape[1:])} differ from the rollouts' "
            f"{tuple(online.chosen.shape[1:])}"
        )
    pooled = None if online.pooled is None else torch.cat([online.pooled, offline.pooled])
    return PairData(
        chosen=torch.cat([online.chosen, offline.chosen]),
        rejected=torch.cat([online.rejected, offline.rejected]),
        embeds=torch.cat([online.embeds, offline.embeds]),
        pooled=pooled,
        extra={key: torch.cat([value, offline.extra[key]]) for key, value in online.extra.items()},
        empty=online.empty,
        offline=len(offline),
        offline_fraction=offline_fraction,
    )


TRAIN_STREAM, HELD_STREAM = 0, 1


def step_generator(seed: int, iteration: int, step: int, micro: int, stream: int = TRAIN_STREAM) -> torch.Generator:
    state = np.random.SeedSequence([seed, iteration + 1, stream, step, micro]).generate_state(1)[0]
    return torch.Generator().manual_seed(int(state))


@dataclass(frozen=True)
class MicroBatch:
    """This process's part of one micro-batch: pair indices, shared noise/timesteps, masks."""

    index: torch.Tensor
    noise: torch.Tensor
    timesteps: torch.Tensor
    empty_mask: torch.Tensor
    flip_mask: torch.Tensor


def flip_latents(latents: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Horizontal flip (width axis) of the rows where ``mask`` is set (``train.hflip``)."""
    if not bool(mask.any()):
        return latents
    return torch.where(mask.view(-1, 1, 1, 1), latents.flip(-1), latents)


def _draw(population: int, count: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` indices into ``range(population)``: without replacement when there are enough."""
    if count <= 0:
        return torch.zeros(0, dtype=torch.long)
    if population >= count:
        return torch.randperm(population, generator=gen)[:count]
    return torch.randint(population, (count,), generator=gen)


def denoising_mse(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample MSE over all non-batch dimensions, in fp32."""
    return (prediction.float() - target.float()).pow(2).mean(dim=tuple(range(1, prediction.ndim)))


class PairObjective(Objective):
    """Base of the objectives trained on preference pairs with the denoising (ε or v) loss.

    Plan: ``train.steps`` updates of ``gradient_accumulation_steps`` micro-batches of ``batch_size``
    pairs per process, drawn at random (with ``data.offline_fraction`` of them offline pairs).
    """

    signal = "pairs"
    multi_process = True
    full_model = True
    offline_pairs = True
    guidance_scale = 1.0  # what the denoiser predicts at (set by load)

    def load(self, inputs: TrainingInputs, model) -> PairData:
        self.use_model(model)
        data = load_pairs(inputs, self.family.conditioning)
        # No CFG pass in training; a guidance embedding (FLUX.1-dev) is an input of the one pass, and the pairs
        # were sampled at the rollouts' scale, so the model is trained there (diffusers' FLUX LoRA scripts train
        # at their guidance_scale too). 1 for a CFG family, as before.
        self.guidance_scale = self.family.cfg_free_scale(data.guidance_scale)
        return data

    @classmethod
    def check(cls, config) -> None:
        from rewardloop.models.families import family_names, get_family

        family = config["model"]["family"]
        if get_family(family).flow_matching and config["data"]["offline_pairs"]:
            raise ObjectiveError(f"data.offline_pairs: offline pairs are encoded for the UNet families "
                                 f"({', '.join(family_names(flow_matching=False))}) only; set data.offline_pairs: "
                                 f"null for a {family} model")

    def use_model(self, model) -> None:
        """The family's denoiser inputs, the VAE's factor and the checkpoint's training noise schedule
        (DDPM; the flow-match grid of a rectified-flow model)."""
        from diffusers import DDPMScheduler, FlowMatchEulerDiscreteScheduler

        self.family: ModelFamily = model.family
        self.vae_scale_factor = model.vae_scale_factor
        scheduler_class = FlowMatchEulerDiscreteScheduler if model.family.flow_matching else DDPMScheduler
        self.noise_scheduler = scheduler_class.from_config(model.scheduler_config)

    def add_offline(self, data: PairData, offline: TrainingInputs, fraction: float) -> PairData:
        """``data.offline_pairs`` (encoded by rule encode_offline_pairs) after the online pairs."""
        return concat_pairs(data, load_pairs(offline, self.family.conditioning), fraction)

    def plan(self, data: PairData, processes: int) -> list[list[tuple[int, int]]]:
        accumulation = self.train.gradient_accumulation_steps
        return [[(step, micro) for micro in range(accumulation)] for step in range(self.train.steps)]

    def micro_batch(self, data: PairData, step: int, micro: int, process_index: int = 0, processes: int = 1,
                    stream: int = TRAIN_STREAM) -> MicroBatch:
        """The global micro-batch (batch_size per process) is drawn whole and each rank takes its slice,
        so P processes of batch_size b train exactly as one process of batch_size P*b. Chosen and
        rejected share noise, timestep, prompt (or the empty prompt) and flip."""
        gen = step_generator(self.seed, self.iteration, step, micro, stream)
        size = self.train.batch_size
        total = size * processes
        offline_count = _offline_count(data, total)
        index = _draw(data.online, total - offline_count, gen)
        noise = torch.randn((total, *data.chosen.shape[1:]), generator=gen)
        timesteps = self._draw_timesteps(total, gen)
        # Drawn after noise and timesteps, so those do not depend on whether the options are on.
        empty_mask = torch.rand(total, generator=gen) < self.train.proportion_empty_prompts
        flip_mask = (torch.rand(total, generator=gen) < 0.5) & bool(self.train.hflip)
        if data.offline:
            index = torch.cat([index, data.online + _draw(data.offline, offline_count, gen)])
        mine = slice(process_index * size, (process_index + 1) * size)
        return MicroBatch(index[mine], noise[mine], timesteps[mine], empty_mask[mine], flip_mask[mine])

    def _draw_timesteps(self, count: int, gen: torch.Generator) -> torch.Tensor:
        """DDPM: uniform integer timesteps; flow: indices into the training grid, u ~ logit-normal(0, 1)."""
        steps = self.noise_scheduler.config.num_train_timesteps
        if self.family.flow_matching:
            u = torch.sigmoid(torch.randn(count, generator=gen))
            return (u * steps).long().clamp(max=steps - 1)
        return torch.randint(steps, (count,), generator=gen)

    def batch_tensors(self, policy: Policy, data: PairData, micro, stream: int = TRAIN_STREAM):
        """(chosen, rejected, noise, timesteps, conditioning) of a micro-batch, on the policy's device."""
        step, index = micro
        batch = self.micro_batch(data, step, index, policy.process_index, policy.num_processes, stream)
        device = policy.device
        chosen = flip_latents(data.chosen[batch.index], batch.flip_mask).to(device)
        rejected = flip_latents(data.rejected[batch.index], batch.flip_mask).to(device)
        cond = {k: v.to(device) for k, v in data.conditioning(batch.index, batch.empty_mask).items()}
        return chosen, rejected, batch.noise.to(device), batch.timesteps.to(device), cond

    def denoising_losses(self, policy: Policy, module, latents, noise, timesteps, cond: Mapping) -> torch.Tensor:
        """Per-sample denoising MSE of ``module`` (ε, or v for v-prediction models; the flow velocity)."""
        if self.family.flow_matching:
            return self._flow_matching_losses(policy, module, latents, noise, timesteps, cond)
        noisy = self.noise_scheduler.add_noise(latents, noise, timesteps)
        if self.noise_scheduler.config.prediction_type == "v_prediction":
            target = self.noise_scheduler.get_velocity(latents, noise, timesteps)
        else:
            target = noise
        return denoising_mse(self._predict(policy, module, noisy, timesteps, cond), target)

    def _flow_matching_losses(self, policy: Policy, module, latents, noise, indices, cond: Mapping) -> torch.Tensor:
        """Per-sample MSE of the predicted velocity against eps - x0 at the grid points ``indices``."""
        sigmas = self.noise_scheduler.sigmas.to(latents.device)[indices]
        timesteps = self.noise_scheduler.timesteps.to(latents.device)[indices]
        s = sigmas.view(-1, *[1] * (latents.ndim - 1))
        noisy = (1 - s) * latents + s * noise
        return denoising_mse(self._predict(policy, module, noisy, timesteps, cond), noise - latents)

    def _predict(self, policy: Policy, module, noisy, timesteps, cond: Mapping) -> torch.Tensor:
        """The family's prediction at ``noisy`` for the pairs' own conditioning (no guidance)."""
        with policy.autocast():
            return self.family.predict(module, noisy, timesteps, cond, guidance_scale=self.guidance_scale,
                                       dtype=policy.model.dtype, pixel_size=noisy.shape[-1] * self.vae_scale_factor)

    @no_grad
    def evaluate(self, policy: Policy, data: PairData, batches: int = 4) -> dict:
        """Mean logs on fixed held batches (noise and timesteps apart from the training stream)."""
        totals: dict[str, float] = {}
        for b in range(batches):
            _, logs = self.loss(policy, data, (b, 0), stream=HELD_STREAM)
            for key, value in logs.items():
                totals[key] = totals.get(key, 0.0) + value / batches
        return totals


def _offline_count(data: PairData, total: int) -> int:
    if not data.offline:
        return 0
    if not data.online:
        return total
    return int(round(total * data.offline_fraction))
