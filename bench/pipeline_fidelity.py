"""Our eval sampler against the family's own diffusers pipeline, in half precision, on any replica and device.

The comparison behind tests/unit/models/test_half_precision_fidelity.py (tiny replicas, CPU) and the fidelity
step of bench/gpu_slot.py (full-size replicas, GPU). Two levels, because half precision makes the images differ
for a reason that is not a bug:
- **Every denoiser call, exactly.** A hook records what the denoiser is handed at every step, by our sampler
  (``stages.common.rollout``, what eval runs) and by the pipeline: the timestep (values and dtype), the
  conditioning (text embeddings, pooled embeddings, SDXL's time ids, FLUX's guidance and position ids) must be
  bit-identical; the first step's latent input too (the same seeded noise). That is where a wrong cast shows:
  the SD3 adapter once handed the transformer ``timestep.to(bf16)``, 792 where the pipeline hands 790.37.
- **The rest, within the latent state's rounding.** Our sampler carries the latent state in fp32 between steps
  (it also feeds the rollouts' log-probs, which must equal the training forward's); the pipelines carry it in
  the denoiser's dtype (and DDIM steps in it). So from the second step on the latent inputs differ by that
  rounding, and the images by what it grows to: neither side is exact, so both are measured against the same
  pipeline run in fp32. The bound (:data:`LATENT_SLACK`, :data:`IMAGE_SLACK`): ours is no further from it than
  the half-precision pipeline is, within 25 % (measured on the tiny replicas: ours 0.4-1.1x the pipeline's error
  on the latent inputs, 0.5-1.05x on the images), plus 0.25 of a pixel level on the images: eval's images are
  uint8 PNGs, the pipeline's floats (rounding them costs 0.25 on average; SDXL in fp16 is the case it matters
  for: ours 0.25, the pipeline's 0.06 levels off its fp32 image).
"""

from __future__ import annotations

import gc
import inspect
from pathlib import Path

import numpy as np
import pandas as pd
import torch

PROMPTS = pd.DataFrame({"prompt_id": ["p0", "p1"], "prompt": ["a red circle", "a green square on blue"]})
SEEDS = [[3], [11]]
LATENT_KEYS = {"sample", "hidden_states"}  # the denoiser's latent input: UNets' and transformers' name for it
IGNORED = {"return_dict", "joint_attention_kwargs", "cross_attention_kwargs", "timestep_cond", "controlnet_blocks"}
LATENT_SLACK = 1.25  # ours may be this much further from the fp32 pipeline's latent inputs than the pipeline is
IMAGE_SLACK = (1.25, 0.25)  # ... and from its image: this factor plus this many pixel levels (uint8 rounding)


def random_lora(replica: Path, family: str, out_dir: Path, device: str = "cpu", dtype=torch.float32) -> Path:
    """An exported LoRA (save_lora) with non-zero A and B on the family's default targets."""
    from rewardloop.models import loading as models
    from rewardloop.models.families import get_family
    from rewardloop.models.lora import attach_lora, save_lora

    spec = get_family(family)
    pipe = models.load_pipeline({"family": family, "path": str(replica)}, device=device, dtype=dtype,
                                text_encoders=False)
    denoiser = getattr(pipe, spec.denoiser)
    lora = {"rank": 4, "alpha": 8, "targets": list(spec.lora_targets)}
    attach_lora(denoiser, lora)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in denoiser.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    save_lora(denoiser, family, lora, out_dir)
    del pipe, denoiser
    release()
    return out_dir


def release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class CallRecorder:
    """Every call of ``module``: its arguments by name (tensors cloned, kept on the CPU)."""

    def __init__(self, module):
        self.calls = []
        signature = inspect.signature(module.forward)

        def before(_, args, kwargs):
            bound = signature.bind_partial(*args, **kwargs).arguments
            self.calls.append({k: v.detach().to("cpu", copy=True) if torch.is_tensor(v) else v
                               for k, v in bound.items() if k not in IGNORED and v is not None})

        self.handle = module.register_forward_pre_hook(before, with_kwargs=True)

    def close(self):
        self.handle.remove()


def flat(value):
    """A tensor, or SDXL's added_cond_kwargs dict, as {name: tensor}."""
    return value if isinstance(value, dict) else {"": value}


def ours(replica: Path, family: str, dtype, steps: int, guidance: float, resolution: int, lora_dir=None,
         device: str = "cpu"):
    """Eval's sampler (``stages.common.rollout``): the denoiser's calls and the decoded images (float64, 0-255)."""
    from rewardloop.models import loading as models
    from rewardloop.models.families import get_family
    from rewardloop.sampling.ddim import SamplerSettings
    from rewardloop.stages.common import rollout
    from rewardloop.stages.score import decode_samples

    spec = get_family(family)
    pipe = models.load_pipeline({"family": family, "path": str(replica)}, lora_dir=lora_dir, device=device,
                                dtype=dtype)
    recorder = CallRecorder(getattr(pipe, spec.denoiser))
    settings = SamplerSettings(steps=steps, guidance_scale=guidance, eta=0.0, resolution=resolution)
    rows, _, _ = rollout(pipe, spec, PROMPTS, SEEDS, settings, batch_size=len(PROMPTS), id_prefix="eval",
                         progress=False)
    recorder.close()
    del pipe
    release()
    images = np.stack([np.asarray(image, dtype=np.float64) for image in decode_samples(rows, "eval")])
    return recorder.calls, images


def theirs(replica: Path, family: str, dtype, steps: int, guidance: float, resolution: int, lora_dir=None,
           device: str = "cpu"):
    """The pipeline as a diffusers user runs it, from the same seeded noise (eval's DDIM for the UNet families)."""
    import diffusers

    from rewardloop.models.families import get_family

    spec = get_family(family)
    pipe = spec.pipeline_class().from_pretrained(str(replica), dtype=dtype, **spec.load_kwargs()).to(device)
    pipe.set_progress_bar_config(disable=True)
    if lora_dir is not None:
        pipe.load_lora_weights(str(lora_dir))
    if not spec.flow_matching:
        pipe.scheduler = diffusers.DDIMScheduler.from_config(pipe.scheduler.config)
    shape = spec.latent_shape(pipe, resolution)
    noise = torch.stack([torch.randn(shape, generator=torch.Generator().manual_seed(s)) for (s,) in SEEDS])
    if family == "flux":
        noise = diffusers.FluxPipeline._pack_latents(noise, *noise.shape)
    recorder = CallRecorder(getattr(pipe, spec.denoiser))
    with torch.no_grad():
        images = pipe(PROMPTS.prompt.tolist(), latents=noise.to(device, dtype), num_inference_steps=steps,
                      guidance_scale=guidance, height=resolution, width=resolution, output_type="np").images
    recorder.close()
    del pipe
    release()
    return recorder.calls, np.asarray(images, dtype=np.float64) * 255


def latent_input(call):
    return call[next(iter(LATENT_KEYS & set(call)))]


def same_calls(ours_calls, their_calls, exact_calls, dtype) -> list[tuple[float, float]]:
    """Every call's timestep and conditioning bit-identical to the pipeline's, the first latent input too
    (AssertionError naming the step and argument otherwise); returns, for each later step, the latent input's
    largest distance to the fp32 pipeline's: (ours, the half-precision pipeline's)."""
    assert len(ours_calls) == len(their_calls) == len(exact_calls) > 1, "the samplers called the denoiser unequally"
    errors = []
    for step, (mine, pipes, exact) in enumerate(zip(ours_calls, their_calls, exact_calls)):
        assert set(mine) == set(pipes), (step, sorted(mine), sorted(pipes))
        for name in pipes:
            for key, expected in flat(pipes[name]).items():
                got = flat(mine[name])[key]
                if name == "timestep":  # a scalar (UNet pipelines) or one per row: the same values and dtype
                    expected = expected.expand(len(got)) if expected.dim() == 0 else expected
                assert got.dtype == expected.dtype, (step, name, key, got.dtype, expected.dtype)
                if not (name in LATENT_KEYS and step > 0):
                    assert torch.equal(got, expected), (step, name, key, (got.float() - expected.float()).abs().max())
        assert latent_input(mine).dtype == latent_input(pipes).dtype == dtype
        if step > 0:
            ours_error = (latent_input(mine).float() - latent_input(exact)).abs().max().item()
            pipe_error = (latent_input(pipes).float() - latent_input(exact)).abs().max().item()
            errors.append((ours_error, pipe_error))
    return errors


def compare(replica: Path, family: str, dtype, steps: int, guidance: float, resolution: int, lora_dir=None,
            device: str = "cpu") -> dict:
    """Ours, the pipeline's and the fp32 pipeline's sampling of the same prompts and seeds: the figures, and
    AssertionError where ours is not the pipeline's (an exact argument differs, or an error beyond the bound)."""
    run = dict(replica=replica, family=family, steps=steps, guidance=guidance, resolution=resolution,
               lora_dir=lora_dir, device=device)
    our_calls, our_images = ours(dtype=dtype, **run)
    their_calls, their_images = theirs(dtype=dtype, **run)
    exact_calls, exact_images = theirs(dtype=torch.float32, **run)
    errors = same_calls(our_calls, their_calls, exact_calls, dtype)
    figures = {"latent_errors": [[a, b] for a, b in errors],
               "ours_pixel_off": float(np.abs(our_images - exact_images).mean()),
               "pipeline_pixel_off": float(np.abs(their_images - exact_images).mean()),
               "between_pixel": float(np.abs(our_images - their_images).mean())}
    assert all(a <= LATENT_SLACK * b + 1e-3 for a, b in errors), ("latent inputs beyond the bound", errors)
    factor, levels = IMAGE_SLACK
    assert figures["ours_pixel_off"] <= factor * figures["pipeline_pixel_off"] + levels, ("images beyond", figures)
    return figures
