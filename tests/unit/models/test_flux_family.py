"""The FLUX.1 adapter (rewardloop.models.families.flux) against diffusers' FluxPipeline itself.

On tiny random-init FLUX.1-dev (guidance embedding) and FLUX.1-schnell (none) pipelines
(rewardloop.models.tiny.flux): the conditioning is the pipeline's ``encode_prompt``; the velocity
is a hand-written call of the transformer on the pipeline's own packing, position ids and
unpacking; a sampled rollout is the pipeline's own denoising loop from the same noise; the grid is
the one the pipeline's scheduler steps through; recorded SDE steps re-score to their log-probs.
Everything in fp32 on the CPU.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from diffusers import FluxPipeline

from rewardloop.models.families import get_family
from rewardloop.models.layout import LayoutError, check_model_folder
from rewardloop.models.loading import load_pipeline
from rewardloop.models.tiny.flux import build_tiny_flux_pipeline
from rewardloop.sampling import sde
from rewardloop.sampling.ddim import SamplerSettings
from rewardloop.sampling.flow import rollout_sigmas, sample_flow

PROMPTS, SEEDS, RESOLUTION, GUIDANCE = ["a red circle on a blue background", "a green square"], [3, 11], 32, 3.5
FLUX = get_family("flux")


@pytest.fixture(scope="module")
def dev_dir(tmp_path_factory):
    """The tiny FLUX.1-dev folder, built once (seconds)."""
    out = tmp_path_factory.mktemp("models") / "tiny-flux-dev"
    build_tiny_flux_pipeline(out, seed=0)
    return out


@pytest.fixture(scope="module")
def dev(dev_dir):
    pipe = FluxPipeline.from_pretrained(dev_dir)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def schnell():
    return build_tiny_flux_pipeline(seed=1, guidance_embeds=False)


@pytest.fixture(scope="module", params=["dev", "schnell"])
def pipe(request, dev, schnell):
    return {"dev": dev, "schnell": schnell}[request.param]


def settings(steps=4):
    return SamplerSettings(steps=steps, guidance_scale=GUIDANCE, eta=0.0, resolution=RESOLUTION)


def initial_noise(shape):
    """sample_flow's initial noise: one draw per image from a generator seeded with its seed."""
    return torch.stack([torch.randn(shape, generator=torch.Generator().manual_seed(s)) for s in SEEDS])


@torch.no_grad()
def test_encode_is_the_pipelines_encode_prompt(dev):
    """The conditioning is encode_prompt's (T5 states at max_sequence_length 512, CLIP pooled): exactly."""
    cond = FLUX.encode(dev, PROMPTS)
    embeds, pooled, text_ids = dev.encode_prompt(PROMPTS, device="cpu")
    assert set(cond) == set(FLUX.conditioning)
    assert cond["prompt_embeds"].shape == (2, 512, dev.text_encoder_2.config.d_model)
    assert cond["pooled_embeds"].shape == (2, dev.text_encoder.config.hidden_size)
    assert torch.equal(cond["prompt_embeds"], embeds) and torch.equal(cond["pooled_embeds"], pooled)
    assert not torch.equal(cond["prompt_embeds"][0], cond["prompt_embeds"][1])  # the prompts do differ


@torch.no_grad()
def test_predict_is_the_transformer_on_the_pipelines_packing(pipe):
    """predict = _unpack(transformer(_pack(x), t / 1000, guidance, ...)); dev reads the guidance scale
    (another scale gives another velocity), schnell ignores it. Same ops in the same order: 1e-6."""
    cond = FLUX.encode(pipe, PROMPTS)
    shape = FLUX.latent_shape(pipe, RESOLUTION)
    x, sigma = initial_noise(shape), 0.7
    b, c, h, w = x.shape
    embeds_on = pipe.transformer.config.guidance_embeds
    guidance = torch.full([b], GUIDANCE) if embeds_on else None
    expected = pipe.transformer(
        hidden_states=FluxPipeline._pack_latents(x, b, c, h, w), timestep=torch.full([b], sigma * 1000) / 1000,
        guidance=guidance, pooled_projections=cond["pooled_embeds"], encoder_hidden_states=cond["prompt_embeds"],
        txt_ids=torch.zeros(cond["prompt_embeds"].shape[1], 3),
        img_ids=FluxPipeline._prepare_latent_image_ids(b, h // 2, w // 2, "cpu", torch.float32), return_dict=False)[0]
    expected = FluxPipeline._unpack_latents(expected, RESOLUTION, RESOLUTION, pipe.vae_scale_factor)
    got = FLUX.predict(pipe.transformer, x, sigma * 1000, cond, guidance_scale=GUIDANCE)
    assert got.dtype == torch.float32 and got.shape == x.shape
    assert torch.allclose(got, expected, atol=1e-6, rtol=0)
    other = FLUX.predict(pipe.transformer, x, sigma * 1000, cond, guidance_scale=1.0)
    if embeds_on:  # dev: the scale is an input of the one pass
        assert not torch.allclose(other, got, atol=1e-4)
    else:  # schnell: no guidance embedding, the scale changes nothing
        assert torch.equal(other, got)


def test_shapes_tokens_and_resolution_factor(dev):
    assert FLUX.latent_shape(dev, RESOLUTION) == (16, 8, 8)  # in_channels 64 = 16 channels x 2x2
    assert FLUX.image_tokens(dev, RESOLUTION) == 16
    assert FLUX.resolution_factor(dev.vae.config, dev.transformer.config)[0] == 2 * dev.vae_scale_factor
    with pytest.raises(ValueError, match="^generate.resolution: 36 is not divisible by 8"):
        FLUX.latent_shape(dev, 36)  # 9x9 latents: not 2x2-packable
    assert FLUX.guidance == "embedded" and not FLUX.uses_cfg and FLUX.cfg_free_scale(GUIDANCE) == GUIDANCE


@torch.no_grad()
def test_sample_flow_is_the_pipelines_denoising_loop(pipe):
    """sample_flow's final latents = FluxPipeline(latents=the same noise packed, 4 steps, guidance 3.5,
    output_type latent) unpacked. Both take the same Euler steps on the same grid (the pipeline's
    scheduler.step: x + (s' - s) v in fp32); the only differences are rounding (the timestep as
    float64 sigma * 1000 here against the scheduler's fp32 timesteps; the SDE module's Euler form
    x (1 + 0 dt) + v (1 + 0) dt). They agree bitwise on the CPU here; atol 1e-5 (latents of unit scale)
    leaves room for another BLAS's summation order, far below the steps' own size (~1)."""
    cond = FLUX.encode(pipe, PROMPTS)
    final, records = sample_flow(pipe, FLUX, cond, SEEDS, settings(), batch_size=2, progress=False)
    assert records is None
    noise = initial_noise(FLUX.latent_shape(pipe, RESOLUTION))
    b, c, h, w = noise.shape
    packed = pipe(prompt_embeds=cond["prompt_embeds"], pooled_prompt_embeds=cond["pooled_embeds"],
                  latents=FluxPipeline._pack_latents(noise, b, c, h, w), num_inference_steps=4,
                  guidance_scale=GUIDANCE, output_type="latent", height=RESOLUTION, width=RESOLUTION).images
    expected = FluxPipeline._unpack_latents(packed, RESOLUTION, RESOLUTION, pipe.vae_scale_factor)
    assert final.shape == noise.shape
    assert torch.allclose(final, expected, atol=1e-5, rtol=0), (final - expected).abs().max()
    assert not torch.allclose(final, noise, atol=0.1)  # it did move


@torch.no_grad()
def test_rollout_sigmas_are_the_pipelines(pipe):
    """The grid = pipe.scheduler.sigmas after the pipeline's own call: dev's linspace(1, 1/4, 4) shifted by
    mu(16 image tokens) (use_dynamic_shifting), schnell's unshifted (shift 1). Exactly."""
    cond = FLUX.encode(pipe, PROMPTS[:1])
    pipe(prompt_embeds=cond["prompt_embeds"], pooled_prompt_embeds=cond["pooled_embeds"], num_inference_steps=4,
         guidance_scale=GUIDANCE, output_type="latent", height=RESOLUTION, width=RESOLUTION,
         generator=torch.Generator().manual_seed(0))
    sigmas = rollout_sigmas(pipe, FLUX, pipe.scheduler.from_config(pipe.scheduler.config), settings())
    assert sigmas.dtype == torch.float32 and len(sigmas) == 5 and float(sigmas[-1]) == 0.0
    assert torch.equal(sigmas, pipe.scheduler.sigmas.float())
    if not pipe.scheduler.config.use_dynamic_shifting:  # schnell: the plain linspace
        assert torch.allclose(sigmas[:-1], torch.tensor([1.0, 0.75, 0.5, 0.25]))


@torch.no_grad()
def test_recorded_sde_steps_rescore_to_their_log_probs(dev):
    """Flow-GRPO SDE steps ([[0, 1], [1, 2]], noise level 0.7): finite log-probs, and re-scoring each recorded
    transition with predict (at the recorded timestep, guidance 3.5) and rewardloop.sampling.sde gives the
    recorded mean and log-prob back (same ops, same order: 1e-5); consecutive steps chain."""
    cond = FLUX.encode(dev, PROMPTS)
    sde_steps = [[0, 1], [1, 2]]
    final, records = sample_flow(dev, FLUX, cond, SEEDS, settings(), batch_size=2, sde_steps=sde_steps,
                                 noise_level=0.7, progress=False)
    sigmas = rollout_sigmas(dev, FLUX, dev.scheduler.from_config(dev.scheduler.config), settings())
    for i, steps in enumerate(sde_steps):
        record = records[i]
        assert torch.isfinite(record["log_probs"]).all() and len(record["log_probs"]) == len(steps)
        rows = {k: v[i: i + 1] for k, v in cond.items()}
        for k, j in enumerate(steps):
            sigma, sigma_next, std = (float(record[key][k]) for key in ("sigmas", "sigmas_next", "std"))
            assert sigma == pytest.approx(float(sigmas[j])) and sigma_next == pytest.approx(float(sigmas[j + 1]))
            assert std == pytest.approx(sde.sde_std(sigmas, j, 0.7)) and std > 0
            x = record["latents"][k][None]
            v = FLUX.predict(dev.transformer, x, record["timesteps"][k], rows, guidance_scale=GUIDANCE)
            mean = sde.step_mean(v, x, sigma, sigma_next, std)
            log_prob = sde.transition_log_prob(record["next_latents"][k][None], mean, sigma, sigma_next, std)
            assert torch.allclose(mean[0], record["means"][k], atol=1e-5, rtol=0)
            assert log_prob.item() == pytest.approx(record["log_probs"][k].item(), abs=1e-5)
            assert math.isfinite(log_prob.item())
        if steps == [0, 1]:  # step 1 starts where step 0 landed
            assert torch.equal(record["latents"][1], record["next_latents"][0])


def test_layout_check_of_the_saved_folder(dev_dir, tmp_path):
    check_model_folder(str(dev_dir), "flux")
    broken = tmp_path / "no-t5"
    shutil.copytree(dev_dir, broken)
    index = json.loads((broken / "model_index.json").read_text())
    index["text_encoder_2"] = [None, None]
    (broken / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(LayoutError, match="lists it as null: component 'text_encoder_2', which model.family flux"):
        check_model_folder(str(broken), "flux")


@torch.no_grad()
def test_load_pipeline_loads_the_saved_folder(dev_dir, dev):
    pipe = load_pipeline({"family": "flux", "path": str(dev_dir)})
    assert isinstance(pipe, FluxPipeline) and pipe.transformer.config.guidance_embeds
    assert pipe.scheduler.config.use_dynamic_shifting and pipe.scheduler.config.shift == 3.0
    got, expected = FLUX.encode(pipe, PROMPTS[:1]), FLUX.encode(dev, PROMPTS[:1])
    assert all(torch.equal(got[k], expected[k]) for k in FLUX.conditioning)
    for a, b in zip(pipe.transformer.state_dict().values(), dev.transformer.state_dict().values()):
        assert torch.equal(a, b)
