"""rewardloop.models.families.flux: FLUX.1's 2x2 latent packing and position ids as diffusers' FluxPipeline
writes them, the latent shape, and the velocity (guidance embedded in dev, none in schnell) against a
hand-written call of a real (random-init) tiny FLUX transformer (objective_checks.flux_velocity)."""

from __future__ import annotations

import pytest
import torch
from diffusers import FluxPipeline

from objective_checks import flux_velocity, tiny_flux_transformer
from rewardloop.models.families import flux


def test_packing_is_diffusers_and_unpacking_inverts_it():
    x = torch.randn(2, 16, 6, 4, generator=torch.Generator().manual_seed(0))
    packed = flux.pack_latents(x)
    assert packed.shape == (2, 3 * 2, 64)
    assert torch.equal(packed, FluxPipeline._pack_latents(x, 2, 16, 6, 4))
    assert torch.equal(flux.unpack_latents(packed, 6, 4), x)


def test_position_ids_are_diffusers():
    assert torch.equal(flux.latent_image_ids(3, 2, "cpu", torch.float32),
                       FluxPipeline._prepare_latent_image_ids(1, 3, 2, "cpu", torch.float32))


def test_latent_channels_count_four_packed_features_per_patch_and_odd_sides_are_refused():
    family = flux.Flux()
    assert family.latent_channels({"in_channels": 64}) == 16
    assert family.resolution_factor({"block_out_channels": [1, 2, 3, 4]}, {}) == \
        (16, "the VAE's factor 8 x FLUX's 2x2 latent packing")


@pytest.mark.parametrize("guidance_embeds", [True, False], ids=["dev", "schnell"])
def test_predict_is_the_transformers_velocity_with_the_scale_embedded_where_it_has_the_input(guidance_embeds):
    model = tiny_flux_transformer(guidance_embeds=guidance_embeds)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, model.config.in_channels // 4, 4, 4, generator=gen)
    embeds = torch.randn(2, 5, model.config.joint_attention_dim, generator=gen)
    pooled = torch.randn(2, model.config.pooled_projection_dim, generator=gen)
    cond = {"prompt_embeds": embeds, "pooled_embeds": pooled}
    with torch.no_grad():
        got = flux.Flux().predict(model, x, 700.0, cond, guidance_scale=3.5, uncond={"ignored": None})
        expected = flux_velocity(model, x, 0.7, embeds, pooled, guidance=3.5)
        other_scale = flux.Flux().predict(model, x, 700.0, cond, guidance_scale=1.0)
    assert got.shape == x.shape
    torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-5)
    # dev reads the scale; schnell has no guidance input and ignores it
    assert (not torch.allclose(got, other_scale)) == guidance_embeds
