"""The sampler a rollout or an eval steps with, built from the scheduler config a checkpoint ships.

A published checkpoint ships the scheduler its authors liked for inference: PNDM for SD1.5, Euler
for SDXL base, flow-match Euler for SD3.5. Rollouts must not follow that choice: Diffusion-DPO's
and DDPO's rollouts are DDIM with eta, and PNDM's or Euler's ``step`` takes no eta (PNDM also
repeats a timestep). So, as ddpo-pytorch does (``DDIMScheduler.from_config(pipeline.scheduler.config)``),
the sampler is rebuilt from the shipped config: its noise schedule, timestep spacing and offset
carry over, its class does not. ``generate.scheduler`` may pick another sampler for rollouts that
need no log-probability (DPO/SFT with eta 0) and for eval.
"""

from __future__ import annotations

from typing import Mapping

AUTO = "auto"
# generate.scheduler -> diffusers class, for the UNet (DDPM-style) families. "auto" is DDIM.
UNET_SAMPLERS = {
    "ddim": "DDIMScheduler",
    "dpm++": "DPMSolverMultistepScheduler",
    "euler": "EulerDiscreteScheduler",
    "pndm": "PNDMScheduler",
}
FLOW_SAMPLER = "FlowMatchEulerDiscreteScheduler"  # the flow families' Euler / flow-SDE grid

# Scheduler classes a checkpoint may ship, whose config holds what the sampler is rebuilt from: a
# DDPM-style noise schedule (num_train_timesteps, betas, spacing, offset) for the UNet families,
# the flow-match shift for the flow families. Another class (an LCM or a consistency scheduler,
# say) belongs to a distilled model these samplers would not fit: it is refused at startup.
SHIPPED_UNET_SCHEDULERS = frozenset({
    "DDIMScheduler", "DDPMScheduler", "PNDMScheduler", "EulerDiscreteScheduler", "EulerAncestralDiscreteScheduler",
    "DPMSolverMultistepScheduler", "DPMSolverSinglestepScheduler", "DEISMultistepScheduler",
    "UniPCMultistepScheduler", "LMSDiscreteScheduler", "HeunDiscreteScheduler", "KDPM2DiscreteScheduler",
    "KDPM2AncestralDiscreteScheduler",
})
SHIPPED_FLOW_SCHEDULERS = frozenset({"FlowMatchEulerDiscreteScheduler", "FlowMatchHeunDiscreteScheduler"})


class SamplerError(ValueError):
    pass


def shipped_schedulers(flow: bool) -> frozenset[str]:
    """The scheduler classes a checkpoint of a flow (or UNet) family may ship."""
    return SHIPPED_FLOW_SCHEDULERS if flow else SHIPPED_UNET_SCHEDULERS


def sampler_name(choice: str, flow: bool) -> str:
    """The sampler ``generate.scheduler`` resolves to: "ddim" or another key of UNET_SAMPLERS, or "flow"."""
    if flow:
        if choice != AUTO:
            raise SamplerError(f"generate.scheduler: {choice!r} is for the UNet families; an SD3-family model "
                               "samples with its flow-match Euler grid (set generate.scheduler: auto)")
        return "flow"
    if choice == AUTO:
        return "ddim"
    if choice not in UNET_SAMPLERS:
        raise SamplerError(f"generate.scheduler: unknown {choice!r} (expected auto or one of "
                           f"{', '.join(UNET_SAMPLERS)})")
    return choice


def check_sampler(choice: str, flow: bool, eta: float, records_steps: bool) -> None:
    """Only DDIM has an eta and a per-step log-probability: other samplers are for eta 0, unrecorded rollouts."""
    name = sampler_name(choice, flow)
    if name in ("ddim", "flow"):
        return
    if records_steps:
        raise SamplerError(f"generate.scheduler: {choice} has no per-step log-probability; this train.loss "
                           "records its rollouts' steps and samples with DDIM (set generate.scheduler: auto)")
    if eta > 0:
        raise SamplerError(f"generate.eta: {eta} is DDIM's; generate.scheduler {choice} takes none "
                           "(set generate.eta: 0 or generate.scheduler: ddim)")


def build_sampler(shipped_config: Mapping, name: str, recorded: bool = False):
    """A fresh scheduler of sampler ``name`` (see :func:`sampler_name`) on the shipped config's schedule.

    ``recorded`` (DDIM rollouts with log-probabilities): the final step goes to alphas_cumprod[0]
    (``set_alpha_to_one: false``, as SD1.5 ships it and ddpo-pytorch samples), never to alpha 1,
    where DDIM's std is 0 and a Gaussian log-probability does not exist.
    """
    import diffusers

    cls = getattr(diffusers, FLOW_SAMPLER if name == "flow" else UNET_SAMPLERS[name])
    config = dict(shipped_config)
    if name != "flow":
        # Latent models never clip x0 to [-1, 1]; DDIM's default (clip_sample true, for pixel models)
        # would apply to a shipped config that omits the key.
        config.setdefault("clip_sample", False)
    overrides = {"set_alpha_to_one": False} if recorded else {}
    if name == "dpm++":
        overrides["algorithm_type"] = "dpmsolver++"
    return cls.from_config(config, **overrides)


def inference_timesteps(scheduler, steps: int) -> list[int]:
    """The scheduler's timesteps for ``steps`` steps, checked: strictly decreasing, inside [0, T)."""
    scheduler.set_timesteps(steps, device="cpu")
    timesteps = [int(t) for t in scheduler.timesteps]
    total = scheduler.config.num_train_timesteps
    if len(timesteps) != steps or any(a <= b for a, b in zip(timesteps, timesteps[1:])) \
            or not all(0 <= t < total for t in timesteps):
        raise SamplerError(f"{type(scheduler).__name__} gives timesteps {timesteps} for {steps} steps; "
                           f"expected {steps} strictly decreasing values in [0, {total})")
    return timesteps


def flow_sigmas(scheduler, steps: int, image_seq_len: int, start=None):
    """The flow grid's sigmas for ``steps`` steps (length steps + 1, ending at 0), fp32 on the CPU.

    A config with ``use_dynamic_shifting`` shifts the grid by the image's token count, as the SD3
    and FLUX pipelines do (``calculate_shift`` with the config's base/max sequence lengths and
    shifts); without it, ``set_timesteps`` would refuse to run. ``start``: the unshifted sigmas to
    shift (FLUX's pipeline passes linspace(1, 1/steps, steps)); default the scheduler's own.
    """
    kwargs = {}
    if scheduler.config.get("use_dynamic_shifting"):
        from diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3 import calculate_shift

        cfg = scheduler.config
        kwargs["mu"] = calculate_shift(image_seq_len, cfg.get("base_image_seq_len", 256),
                                       cfg.get("max_image_seq_len", 4096), cfg.get("base_shift", 0.5),
                                       cfg.get("max_shift", 1.16))
    if start is not None:
        scheduler.set_timesteps(sigmas=list(start), device="cpu", **kwargs)
    else:
        scheduler.set_timesteps(steps, device="cpu", **kwargs)
    return scheduler.sigmas.detach().float().cpu().clone()


def shifted_sigmas(scheduler, unshifted, image_seq_len: int):
    """``unshifted`` positions shifted as the scheduler shifts its grid (static shift, or dynamic by the image's
    token count), then its final 0 (length len(unshifted) + 1, fp32 on the CPU); ``scheduler`` is left as it was."""
    return flow_sigmas(type(scheduler).from_config(scheduler.config), len(unshifted), image_seq_len, start=unshifted)
