"""rewardloop.models.families.unet and .sd15: the SD1.5 adapter's encode, latent shape and guided ε prediction
on a real (random-init, in memory) tiny diffusers pipeline, against the UNet and text encoder called directly."""

from __future__ import annotations

import pytest
import torch

from objective_checks import tiny_sd15_pipeline
from rewardloop.models.families import FamilyError, sd15, unet


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    return tiny_sd15_pipeline(tmp_path_factory.mktemp("sd15"))


def test_sd15_is_a_unet_family_that_loads_without_the_safety_checker():
    family = sd15.SD15()
    assert isinstance(family, unet.UNetFamily) and family.denoiser == "unet" and not family.flow_matching
    assert family.load_kwargs() == {"safety_checker": None, "requires_safety_checker": False}


def test_encode_is_the_text_encoders_states_of_the_padded_prompts(pipe):
    prompts = ["a red circle on a blue background", ""]
    cond = sd15.SD15().encode(pipe, prompts)
    assert set(cond) == {"prompt_embeds"}
    tokens = pipe.tokenizer(prompts, padding="max_length", max_length=pipe.tokenizer.model_max_length,
                            truncation=True, return_tensors="pt")
    with torch.no_grad():
        expected = pipe.text_encoder(tokens.input_ids)[0]
    assert cond["prompt_embeds"].shape == (2, pipe.tokenizer.model_max_length, expected.shape[-1])
    torch.testing.assert_close(cond["prompt_embeds"], expected)
    assert not cond["prompt_embeds"].requires_grad


def test_latent_shape_is_the_vae_factor_down_and_refuses_an_indivisible_resolution(pipe):
    family = sd15.SD15()
    factor = pipe.vae_scale_factor
    assert family.latent_shape(pipe, 4 * factor) == (pipe.unet.config.in_channels, 4, 4)
    assert family.image_tokens(pipe, 4 * factor) == 16
    with pytest.raises(ValueError, match=rf"generate\.resolution: {4 * factor + 1} is not divisible by the VAE factor {factor}"):
        family.latent_shape(pipe, 4 * factor + 1)
    with pytest.raises(FamilyError, match="model.family sd15 is not a rectified-flow family"):
        family.sigmas(pipe.scheduler, 4, 16)


def test_predict_is_classifier_free_guided_eps(pipe):
    family, model = sd15.SD15(), pipe.unet
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, model.config.in_channels, 4, 4, generator=gen)
    embeds = torch.randn(2, 6, model.config.cross_attention_dim, generator=gen)
    empty = torch.randn(1, 6, model.config.cross_attention_dim, generator=gen)
    with torch.no_grad():
        text = model(x, torch.tensor([300, 300]), encoder_hidden_states=embeds).sample
        plain = model(x, torch.tensor([300, 300]), encoder_hidden_states=empty.expand(2, -1, -1)).sample
    got = family.predict(model, x, 300, {"prompt_embeds": embeds}, guidance_scale=5.0,
                         uncond={"prompt_embeds": empty})
    torch.testing.assert_close(got, plain + 5.0 * (text - plain), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(family.predict(model, x, 300, {"prompt_embeds": embeds}), text, rtol=1e-5, atol=1e-6)
