"""rewardloop.models.families.sd3: the SD3 adapter on a real (random-init, in memory) tiny diffusers pipeline:
its conditioning, latent shape and tokens, the shifted grid, and the guided velocity against the transformer."""

from __future__ import annotations

import pytest
import torch

from objective_checks import flow_velocity, tiny_sd3_pipeline
from rewardloop.models.families import get_family, sd3


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    return tiny_sd3_pipeline(tmp_path_factory.mktemp("sd3"))


def test_encode_gives_the_pipelines_prompt_and_pooled_embeddings_without_t5(pipe):
    family = sd3.SD3()
    assert family.t5_tokens(pipe) == 0  # no T5 in the folder: no (all-zero) T5 tokens
    cond = family.encode(pipe, ["a red circle", "a blue square"])
    embeds, _, pooled, _ = pipe.encode_prompt(prompt=["a red circle", "a blue square"], prompt_2=None, prompt_3=None,
                                              do_classifier_free_guidance=False, max_sequence_length=0)
    torch.testing.assert_close(cond["prompt_embeds"], embeds)
    torch.testing.assert_close(cond["pooled_embeds"], pooled)
    assert cond["pooled_embeds"].shape[0] == 2


def test_latent_shape_and_image_tokens_follow_the_vae_factor_and_the_patch_size(pipe):
    family = sd3.SD3()
    factor, patch = pipe.vae_scale_factor, pipe.transformer.config.patch_size
    assert family.latent_shape(pipe, 8 * factor) == (pipe.transformer.config.in_channels, 8, 8)
    assert family.image_tokens(pipe, 8 * factor) == (8 // patch) ** 2
    vae_factor, why = family.resolution_factor({"block_out_channels": [1, 2, 3, 4]}, {"patch_size": 2})
    assert (vae_factor, why) == (16, "the VAE's factor 8 x the transformer's patch size 2")
    with pytest.raises(ValueError, match=r"generate\.resolution: .* is not divisible by the VAE factor"):
        family.latent_shape(pipe, 8 * factor + 1)


def test_the_sigma_grid_is_the_shipped_schedulers_shifted_grid(pipe):
    import copy

    sigmas = sd3.SD3().sigmas(pipe.scheduler, 4, 16)
    reference = copy.deepcopy(pipe.scheduler)  # diffusers' own grid, as StableDiffusion3Pipeline steps it
    reference.set_timesteps(4)
    assert len(sigmas) == 5 and float(sigmas[-1]) == 0.0
    torch.testing.assert_close(sigmas.double(), reference.sigmas.double(), rtol=1e-5, atol=1e-6)
    shift = pipe.scheduler.config.shift
    assert shift > 1 and float(sigmas[2]) > 0.5  # shifted towards the noisy end: the plain grid's middle is 0.5


def test_predict_is_the_guided_velocity_at_sigma_times_1000(pipe):
    model, family = pipe.transformer, sd3.SD3()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, model.config.in_channels, 8, 8, generator=gen)
    width, pooled_width = model.config.joint_attention_dim, model.config.pooled_projection_dim
    cond = {"prompt_embeds": torch.randn(2, 5, width, generator=gen), "pooled_embeds": torch.randn(2, pooled_width, generator=gen)}
    uncond = {"prompt_embeds": torch.randn(1, 5, width, generator=gen), "pooled_embeds": torch.randn(1, pooled_width, generator=gen)}
    with torch.no_grad():
        text = flow_velocity(model, x, 0.6, cond["prompt_embeds"], cond["pooled_embeds"])
        plain = flow_velocity(model, x, 0.6, uncond["prompt_embeds"].expand(2, -1, -1),
                              uncond["pooled_embeds"].expand(2, -1))
        got = family.predict(model, x, 600.0, cond, guidance_scale=4.5, uncond=uncond)
    torch.testing.assert_close(got.double(), plain + 4.5 * (text - plain), rtol=1e-4, atol=1e-5)


# --- a pipeline class without a third text encoder ----------------------------------------------------------

def test_a_pipeline_without_a_third_text_encoder_has_no_t5_tokens():
    class Pipeline:  # an SD3-like pipeline class that has no text_encoder_3 attribute at all
        transformer = None

    assert get_family("sd3").t5_tokens(Pipeline()) == 0
