"""DiffusionNFT (Zheng et al., 2025): online RL on the forward process, for flow-matching models.

Rollouts are plain ODE samples (no log-probs); training uses only their clean latents x0 and
rewards. Each advantage maps to an optimality probability r = A / (2 m) + 1/2 in [0, 1], with m the
largest |A| of the iteration (the advantages stage already clipped them to adv_clip_max). At a noised point x_t = (1 - t) x0 + t eps, with the velocity target v = eps - x0, the
trained velocity v_theta and the "old" policy's v_old define an implicit positive and negative policy

    v_pos = (1 - beta) v_old + beta v_theta,      v_neg = (1 + beta) v_old - beta v_theta

and the loss  r |v_pos - v|^2 + (1 - r) |v_neg - v|^2  (mean over latent dims, then over samples)
pulls the positive mixture toward good samples and pushes the negative one toward bad samples. The
old policy is an adapter that starts as model(it-1)'s LoRA and follows the trained one by EMA
(decay ``nft_ema_decay``) after every optimizer step. No classifier-free guidance in training
(the conditional velocity is trained); the paper's adaptive loss weighting is not used.
"""

from __future__ import annotations

import numpy as np
import torch

from rewardloop.artifacts import read_table, read_tensors
from rewardloop.objectives.grpo import GRPOTrainer
from rewardloop.training.trainer import TrainingError


def optimality(advantages: torch.Tensor, clip_max: float) -> torch.Tensor:
    """r in [0, 1]: 1/2 at zero advantage, 1 at +clip_max and above, 0 at -clip_max and below."""
    return advantages.clamp(-clip_max, clip_max) / (2 * clip_max) + 0.5


def nft_loss(v_theta, v_old, target, r, beta: float) -> torch.Tensor:
    """Per-sample DiffusionNFT loss (see the module docstring); ``r`` is [B]."""
    v_pos = (1 - beta) * v_old + beta * v_theta
    v_neg = (1 + beta) * v_old - beta * v_theta
    dims = tuple(range(1, target.ndim))
    pos = ((v_pos.float() - target.float()) ** 2).mean(dim=dims)
    neg = ((v_neg.float() - target.float()) ** 2).mean(dim=dims)
    return r * pos + (1 - r) * neg


class NFTData:
    """Final latents, advantages and text conditioning of the kept samples."""

    family = "sd3"  # NFT's target is flow matching's velocity (config.check_loss_family)

    def __init__(self, latents, advantages, embeds, pooled, clip_max: float):
        self.latents, self.advantages, self.embeds, self.pooled = latents, advantages, embeds, pooled
        self.clip_max = clip_max
        self.recorded_steps = 1  # one noised point per sample and micro-batch

    def __len__(self) -> int:
        return len(self.latents)


def load_nft_data(advantages_path, latents_path) -> NFTData:
    table = read_table(advantages_path, required=["sample_id", "prompt_id", "advantage"]).to_pandas()
    if table.empty:
        raise TrainingError(f"{advantages_path}: no samples with a non-zero advantage (every group tied?)")
    tensors = read_tensors(latents_path)
    advantages = torch.tensor(table.advantage.to_numpy(), dtype=torch.float32)
    clip_max = float(max(advantages.abs().max().item(), 1e-6))  # the stage's clip (or the largest |A|)
    return NFTData(
        latents=torch.stack([tensors[f"latents/{s}"] for s in table.sample_id]),
        advantages=advantages,
        embeds=torch.stack([tensors[f"prompt_embeds/{p}"] for p in table.prompt_id]),
        pooled=torch.stack([tensors[f"pooled_embeds/{p}"] for p in table.prompt_id]),
        clip_max=clip_max,
    )


class NFTTrainer(GRPOTrainer):
    """Trained adapter = the LoRA; old policy = an EMA copy of its weights, swapped in for v_old."""

    def after_init_lora(self) -> None:
        self.old = [p.detach().clone() for p in self.params]

    def _swap_old(self) -> None:
        with torch.no_grad():
            for p, old in zip(self.params, self.old):
                current = p.detach().clone()
                p.copy_(old)
                old.copy_(current)

    def _velocity(self, x_t, t, embeds, pooled):
        timestep = t * self.num_train_timesteps
        return self.unet(x_t, encoder_hidden_states=embeds, pooled_projections=pooled, timestep=timestep).sample

    def nft_step_loss(self, data: NFTData, index, step: int, micro: int):
        device = self.accelerator.device
        state = np.random.SeedSequence([self.seed, self.iteration + 1, 11, step, micro]).generate_state(1)[0]
        gen = torch.Generator().manual_seed(int(state))
        x0 = data.latents[index]
        noise = torch.randn(x0.shape, generator=gen)
        t = torch.rand(len(index), generator=gen).clamp(0.02, 0.98)  # avoid the degenerate ends
        x_t = ((1 - t.view(-1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1) * noise).to(device)
        embeds, pooled, t = data.embeds[index].to(device), data.pooled[index].to(device), t.to(device)
        self._swap_old()
        try:
            with torch.no_grad():
                v_old = self._velocity(x_t, t, embeds, pooled)
        finally:
            self._swap_old()
        v_theta = self._velocity(x_t, t, embeds, pooled)
        r = optimality(data.advantages[index], data.clip_max).to(device)
        loss = nft_loss(v_theta, v_old, (noise - x0).to(device), r, self.cfg["nft_beta"]).mean()
        return loss, {"train/loss": loss.item(),
                      "train/old_new_velocity_diff": (v_theta.detach() - v_old).abs().mean().item()}

    # run() is GRPOTrainer's: the hooks below make it NFT's.
    def micro_loss(self, data: NFTData, step: int, micro: int, index, k: int):
        return self.nft_step_loss(data, index, step, micro)

    def on_resume(self) -> None:
        self.after_init_lora()  # the EMA copy is not checkpointed: restart it from the resumed weights

    def after_update(self) -> None:
        decay = self.cfg["nft_ema_decay"]
        with torch.no_grad():
            for p, old in zip(self.params, self.old):
                old.mul_(decay).add_(p.detach(), alpha=1 - decay)


def summarize_nft(history: list[dict], resumed_from: int) -> dict:
    summary = {"resumed_from_step": resumed_from, "steps": len(history)}
    if history:
        summary["train/loss"] = float(np.mean([h["train/loss"] for h in history]))
        summary["train/loss/last"] = history[-1]["train/loss"]
    return summary
