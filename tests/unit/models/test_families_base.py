"""rewardloop.models.families.base: the family registry and the guidance helpers every family's predict uses
(on the SD1.5 and SD3 adapters, model_helpers.guided_eps / guided_velocity: one pass up to guidance 1, the
latents' device, a bfloat16 denoiser's dtype)."""

from __future__ import annotations

import copy

import pytest
import torch

from meta_device import META, on_meta
from model_helpers import guided_eps, guided_velocity
from objective_checks import flow_velocity, tiny_transformer, tiny_unet
from rewardloop.models.families import base


def test_get_family_names_the_known_families_when_one_is_unknown():
    assert base.get_family("sd15").name == "sd15"
    with pytest.raises(base.FamilyError, match=r"^model\.family: unknown family 'sd4' \(expected one of sd15, "):
        base.get_family("sd4")


def test_family_names_by_kind_partition_the_registry():
    flow, ddpm = base.family_names(flow_matching=True), base.family_names(flow_matching=False)
    assert set(flow) | set(ddpm) == set(base.family_names()) and not set(flow) & set(ddpm)
    assert {"sd3", "flux"} <= set(flow) and {"sd15", "sdxl"} <= set(ddpm)


def test_registering_a_name_twice_is_refused():
    class Again(base.ModelFamily):
        name = "sd15"

    with pytest.raises(ValueError, match="model family 'sd15' registered twice"):
        base.register_family(Again)
    assert type(base.get_family("sd15")).__name__ == "SD15"


def test_traits_are_the_kind_and_the_capabilities_and_embedded_guidance_keeps_the_rollout_scale():
    sd15, flux = base.get_family("sd15"), base.get_family("flux")
    assert sd15.traits == {"ddpm", "recorded_steps"} and flux.traits == {"flow_matching", "recorded_steps"}
    assert sd15.cfg_free_scale(7.5) == 1.0 and sd15.uses_cfg
    assert flux.cfg_free_scale(3.5) == 3.5 and not flux.uses_cfg
    assert base.get_family("sd3").tokenizers == ("tokenizer", "tokenizer_2", "tokenizer_3")


def test_a_family_without_a_tiny_builder_says_so():
    class NoTiny(base.ModelFamily):
        name = "no-tiny"

    with pytest.raises(base.FamilyError, match="model.family: no-tiny has no embedded tiny model"):
        NoTiny().tiny_build_function()


def test_cfg_batch_doubles_with_the_unconditional_rows_first_and_combine_guides():
    latents, t = torch.randn(3, 2, 2, 2), torch.tensor([5, 6, 7])
    cond, uncond = {"prompt_embeds": torch.randn(3, 4, 8)}, {"prompt_embeds": torch.zeros(1, 4, 8)}
    x, steps, rows = base.cfg_batch(latents, t, cond, uncond, 4.0)
    assert torch.equal(x, torch.cat([latents, latents])) and steps.tolist() == [5, 6, 7, 5, 6, 7]
    assert torch.equal(rows["prompt_embeds"][:3], torch.zeros(3, 4, 8))
    assert torch.equal(rows["prompt_embeds"][3:], cond["prompt_embeds"])
    out = torch.cat([torch.full((3, 1), 1.0), torch.full((3, 1), 2.0)])
    assert torch.equal(base.combine(out, 3, 4.0), torch.full((3, 1), 1.0 + 4.0 * (2.0 - 1.0)))
    # no second pass without an unconditional row or at guidance <= 1
    for u, g in ((None, 4.0), (uncond, 1.0)):
        x, _, _ = base.cfg_batch(latents, t, cond, u, g)
        assert x is latents and base.combine(latents, 3, g) is latents


def test_batch_timesteps_broadcasts_keeping_integer_timesteps_integer():
    latents = torch.zeros(4, 1, 1, 1)
    assert base.batch_timesteps(7, latents).tolist() == [7] * 4
    assert base.batch_timesteps(7, latents).dtype == torch.int64
    floats = base.batch_timesteps(torch.tensor(0.5, dtype=torch.float64), latents)
    assert floats.dtype == torch.float32 and floats.tolist() == [0.5] * 4
    assert base.batch_timesteps(torch.tensor([1, 2, 3, 4]), latents).tolist() == [1, 2, 3, 4]


# --- guidance only above 1 (diffusers: do_classifier_free_guidance = scale > 1), on the SD1.5 and SD3 adapters ---

class Counting(torch.nn.Module):
    """A denoiser that records the batch size of every forward pass."""

    def __init__(self, model):
        super().__init__()
        self.model, self.batches = model, []

    @property
    def dtype(self):
        return self.model.dtype

    def forward(self, x, *args, **kwargs):
        self.batches.append(len(x))
        return self.model(x, *args, **kwargs)


@pytest.mark.parametrize("guidance", [0.5, 1.0])
@torch.no_grad()
def test_guidance_up_to_1_is_one_conditional_pass(guidance):
    gen = torch.Generator().manual_seed(0)
    x, embeds, uncond = torch.randn(2, 4, 8, 8, generator=gen), torch.randn(2, 16, 64, generator=gen), \
        torch.randn(2, 16, 64, generator=gen)
    unet = Counting(tiny_unet())
    got = guided_eps(unet, x, 501, embeds, uncond, guidance)
    assert unet.batches == [2]
    assert torch.equal(got, unet.model(x, torch.tensor([501, 501]), encoder_hidden_states=embeds).sample)
    x, pooled, uncond_pooled = torch.randn(2, 16, 8, 8, generator=gen), torch.randn(2, 64, generator=gen), \
        torch.randn(2, 64, generator=gen)
    transformer = Counting(tiny_transformer())
    got = guided_velocity(transformer, x, 0.9, embeds, pooled, uncond, uncond_pooled, guidance=guidance)
    assert transformer.batches == [2]
    assert torch.allclose(got.double(), flow_velocity(transformer.model, x, 0.9, embeds, pooled), atol=1e-6)


@torch.no_grad()
def test_guidance_above_1_without_an_unconditional_row_is_the_conditional_pass():
    gen = torch.Generator().manual_seed(1)
    x, embeds = torch.randn(2, 4, 8, 8, generator=gen), torch.randn(2, 16, 64, generator=gen)
    unet = Counting(tiny_unet())
    got = guided_eps(unet, x, 501, embeds, None, 4.0)
    assert unet.batches == [2]
    assert torch.equal(got, unet.model(x, torch.tensor([501, 501]), encoder_hidden_states=embeds).sample)
    x, pooled = torch.randn(2, 16, 8, 8, generator=gen), torch.randn(2, 64, generator=gen)
    transformer = Counting(tiny_transformer())
    got = guided_velocity(transformer, x, 0.9, embeds, pooled, guidance=4.0)
    assert transformer.batches == [2]


# --- the guided predictions stay on the latents' device; a bfloat16 denoiser gets its inputs in bfloat16 ----

@pytest.mark.parametrize("guidance", [1.0, 3.0], ids=["plain", "cfg"])
def test_guided_predictions_stay_on_the_latents_device(guidance):
    """A python timestep or sigma (as the samplers pass them) becomes a tensor on the latents' device."""
    x, embeds, uncond = on_meta((2, 4, 8, 8), (2, 16, 64), (2, 16, 64))
    assert guided_eps(tiny_unet().to(META), x, 501, embeds, uncond, guidance).device == META
    x, pooled, uncond_pooled = on_meta((2, 16, 8, 8), (2, 64), (2, 64))
    assert guided_velocity(tiny_transformer().to(META), x, 0.9, embeds, pooled, uncond, uncond_pooled,
                           guidance).device == META


def close(got: torch.Tensor, expected: torch.Tensor, tolerance: float = 0.05) -> bool:
    """Within bfloat16's precision: the error's norm a few percent of the value's."""
    return float((got.double() - expected.double()).norm() / expected.double().norm()) < tolerance


@pytest.mark.parametrize("guidance", [1.0, 3.0], ids=["plain", "cfg"])
def test_a_bfloat16_unet_gets_its_inputs_in_bfloat16(guidance):
    gen = torch.Generator().manual_seed(0)
    x, embeds, uncond = torch.randn(2, 4, 8, 8, generator=gen), torch.randn(2, 16, 64, generator=gen), \
        torch.randn(2, 16, 64, generator=gen)
    unet = tiny_unet()
    with torch.no_grad():
        e_text = unet(x, torch.tensor([501, 501]), encoder_hidden_states=embeds).sample
        e_uncond = unet(x, torch.tensor([501, 501]), encoder_hidden_states=uncond).sample
        expected = e_uncond + guidance * (e_text - e_uncond) if guidance > 1 else e_text
        got = guided_eps(copy.deepcopy(unet).to(torch.bfloat16), x, 501, embeds, uncond, guidance)
    assert got.dtype == torch.float32 and close(got, expected)


@pytest.mark.parametrize("guidance", [1.0, 3.0], ids=["plain", "cfg"])
def test_a_bfloat16_transformer_gets_its_inputs_in_bfloat16(guidance):
    gen = torch.Generator().manual_seed(0)
    x, embeds, pooled = torch.randn(2, 16, 8, 8, generator=gen), torch.randn(2, 16, 64, generator=gen), \
        torch.randn(2, 64, generator=gen)
    uncond, uncond_pooled = torch.randn(2, 16, 64, generator=gen), torch.randn(2, 64, generator=gen)
    transformer = tiny_transformer()
    with torch.no_grad():
        v_text = flow_velocity(transformer, x, 0.9, embeds, pooled)
        v_uncond = flow_velocity(transformer, x, 0.9, uncond, uncond_pooled)
        expected = v_uncond + guidance * (v_text - v_uncond) if guidance > 1 else v_text
        got = guided_velocity(copy.deepcopy(transformer).to(torch.bfloat16), x, 0.9,
                              embeds, pooled, uncond, uncond_pooled, guidance=guidance)
    assert got.dtype == torch.float32 and close(got, expected)


@pytest.mark.parametrize("family, vae_config", [
    ("sd15", {"scaling_factor": 0.18215}),  # SD1.5's VAE: no shift_factor
    ("sd3", {"scaling_factor": 1.5305, "shift_factor": 0.0609}),  # SD3.5's vae/config.json
    ("flux", {"scaling_factor": 0.3611, "shift_factor": 0.1159})])  # FLUX.1's
def test_what_the_vae_decodes_is_what_the_pipelines_hand_it_and_encoding_inverts_it(family, vae_config):
    from types import SimpleNamespace

    vae = SimpleNamespace(config=SimpleNamespace(**{"shift_factor": None, **vae_config}))
    latents = torch.randn(2, 4, 3, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    adapter = base.get_family(family)
    # StableDiffusion3Pipeline / FluxPipeline: latents / scaling_factor + shift_factor; SD1.5: / scaling_factor
    expected = latents / vae_config["scaling_factor"] + vae_config.get("shift_factor", 0.0)
    torch.testing.assert_close(adapter.decoder_input(vae, latents), expected, rtol=0, atol=0)
    torch.testing.assert_close(adapter.latents_from_encoder(vae, adapter.decoder_input(vae, latents)), latents)
