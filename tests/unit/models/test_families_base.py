"""rewardloop.models.families.base: the family registry and the guidance helpers every family's predict uses."""

from __future__ import annotations

import pytest
import torch

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
        NoTiny().build_tiny("unused")


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
