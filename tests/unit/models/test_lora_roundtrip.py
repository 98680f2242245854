"""Every layer of an exported LoRA lands where users load it: our sampler (fused) and a plain diffusers
pipeline (``load_lora_weights``), on the published-layout replicas of each family.

The expected weights are the base weights plus (alpha / rank) * B @ A of the trained adapter, computed
here from the adapter's own tensors. diffusers reads a LoRA file's key format off one key and skips
the layers it cannot place with a warning, so a file mixing lora.down/up and lora_A/B names (what SD3
LoRAs with the recipes' add_*_proj targets were saved as) loses layers silently: that must not pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rewardloop.models import loading as models
from rewardloop.models.families import get_family
from rewardloop.models.lora import attach_lora, save_lora
from rewardloop.models.replicas import build_replica

torch.set_num_threads(1)
UNET_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"]  # the schema's default
SD3_TARGETS = ["attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out", "attn.to_k",
               "attn.to_out.0", "attn.to_q", "attn.to_v"]  # flow_grpo's, as the SD3.5 recipes set them
CASES = [("sd15", UNET_TARGETS), ("sdxl", UNET_TARGETS), ("sd3", UNET_TARGETS), ("sd3", SD3_TARGETS)]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    root = tmp_path_factory.mktemp("replicas")
    for family in ("sd15", "sdxl", "sd3"):
        build_replica(family, root / family)
    return {family: root / family for family in ("sd15", "sdxl", "sd3")}


def trained_lora(replica, family: str, targets, out_dir):
    """A LoRA with random (non-zero) A and B on ``targets``, saved by save_lora; {module: expected delta}."""
    denoiser = getattr(models.load_pipeline({"family": family, "path": str(replica)}), get_family(family).denoiser)
    lora = {"rank": 4, "alpha": 8, "targets": targets}
    attach_lora(denoiser, lora)
    gen = torch.Generator().manual_seed(0)
    deltas = {}
    with torch.no_grad():
        for name, module in denoiser.named_modules():
            if "default" in getattr(module, "lora_A", {}):
                a, b = module.lora_A["default"].weight, module.lora_B["default"].weight
                a.copy_(torch.randn(a.shape, generator=gen) * 0.1)
                b.copy_(torch.randn(b.shape, generator=gen) * 0.1)
                deltas[name] = (lora["alpha"] / lora["rank"]) * (b @ a.flatten(1)).reshape(module.base_layer.weight.shape)
    save_lora(denoiser, family, lora, out_dir)
    return deltas


def assert_fused(denoiser, base, deltas):
    weights, base_weights = dict(denoiser.named_parameters()), dict(base.named_parameters())
    for name, delta in deltas.items():
        got = weights[f"{name}.weight"] - base_weights[f"{name}.weight"]
        assert torch.allclose(got, delta, atol=1e-5), name


@torch.no_grad()
@pytest.mark.parametrize("family, targets", CASES, ids=["sd15", "sdxl", "sd3-default-targets", "sd3-recipe-targets"])
def test_every_lora_layer_lands_in_our_sampler_and_in_plain_diffusers(replicas, tmp_path, family, targets):
    replica, spec = replicas[family], get_family(family)
    deltas = trained_lora(replica, family, targets, tmp_path / "lora")
    assert deltas and all(any(n.endswith(t) for t in targets) for n in deltas)
    base = getattr(models.load_pipeline({"family": family, "path": str(replica)}), spec.denoiser)
    ours = models.load_pipeline({"family": family, "path": str(replica)}, lora_dir=str(tmp_path / "lora"))
    assert_fused(getattr(ours, spec.denoiser), base, deltas)
    plain = spec.pipeline_class().from_pretrained(str(replica), dtype=torch.float32, **spec.load_kwargs())
    plain.load_lora_weights(str(tmp_path / "lora"))
    plain.fuse_lora()
    plain.unload_lora_weights()  # the fused weights stay
    assert_fused(getattr(plain, spec.denoiser), base, deltas)


@torch.no_grad()
def test_an_sd3_lora_saved_with_mixed_key_names_still_loads_whole(replicas, tmp_path):
    """The files SD3 runs wrote before: lora.down/up for the attention projections, lora_A/B for add_*_proj."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    deltas = trained_lora(replicas["sd3"], "sd3", SD3_TARGETS, tmp_path / "lora")
    path = tmp_path / "lora" / models.LORA_WEIGHTS
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
        tensors = {(k.replace(".lora_A.", ".lora.down.").replace(".lora_B.", ".lora.up.") if ".attn.to_" in k
                    and "to_add_out" not in k else k): handle.get_tensor(k) for k in handle.keys()}
    assert any(".lora.down." in k for k in tensors) and any(".lora_A." in k for k in tensors)
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    save_file(tensors, str(legacy / models.LORA_WEIGHTS), metadata=metadata)
    base = models.load_pipeline({"family": "sd3", "path": str(replicas["sd3"])}).transformer
    ours = models.load_pipeline({"family": "sd3", "path": str(replicas["sd3"])}, lora_dir=str(legacy))
    assert_fused(ours.transformer, base, deltas)


def test_a_lora_of_another_architecture_is_refused_naming_the_file(replicas, tmp_path):
    trained_lora(replicas["sdxl"], "sdxl", UNET_TARGETS, tmp_path / "sdxl-lora")
    with pytest.raises(models.ModelError, match=rf"{tmp_path}/sdxl-lora/pytorch_lora_weights\.safetensors: "):
        models.load_pipeline({"family": "sd15", "path": str(replicas["sd15"])}, lora_dir=str(tmp_path / "sdxl-lora"))


# --- FLUX.1: the exported LoRA in plain diffusers' FluxPipeline -----------------------------------

@pytest.fixture(scope="module")
def tiny_flux(tmp_path_factory):
    """The tiny FLUX.1-dev folder (random init: rewardloop.models.tiny.flux)."""
    from rewardloop.models.tiny.flux import build_tiny_flux_pipeline

    folder = tmp_path_factory.mktemp("flux") / "tiny-flux-dev"
    build_tiny_flux_pipeline(folder, seed=0)
    return folder


def flux_eval_images(pipe, steps: int = 2):
    """What eval samples (the pipeline's sampler here, rewardloop.sampling.flow.sample_flow, then the VAE) and
    what a diffusers user samples (FluxPipeline.__call__) from the same noise: two prompts, guidance 3.5, 32 px.
    (eval's uint8 images [B, H, W, 3] as its PNGs hold them, the pipeline's floats in [0, 1] [B, 3, H, W])."""
    from diffusers import FluxPipeline

    from rewardloop.sampling.ddim import SamplerSettings
    from rewardloop.sampling.flow import sample_flow

    family, prompts, seeds = get_family("flux"), ["a red circle", "a green square on blue"], [3, 11]
    settings = SamplerSettings(steps=steps, guidance_scale=3.5, eta=0.0, resolution=32)
    ours = family.decode_images(pipe, sample_flow(pipe, family, family.encode(pipe, prompts), seeds, settings,
                                                  batch_size=2, progress=False)[0], 2)
    noise = torch.stack([torch.randn(family.latent_shape(pipe, 32), generator=torch.Generator().manual_seed(s))
                         for s in seeds])
    b, c, h, w = noise.shape
    theirs = pipe(prompts, latents=FluxPipeline._pack_latents(noise, b, c, h, w), num_inference_steps=steps,
                  guidance_scale=3.5, height=32, width=32, output_type="pt").images
    return torch.stack([torch.from_numpy(np.array(im)) for im in ours]), theirs


@torch.no_grad()
def test_a_flux_lora_loads_in_plain_diffusers_and_samples_what_ours_does(tiny_flux, tmp_path):
    """save_lora on FLUX (flux.py's lora_targets, flow_grpo's: joint and single blocks' attention, the text
    stream's projections, both feed-forwards) keeps peft's lora_A/B names under transformer.: every layer lands
    in our fused loading and in a plain FluxPipeline.load_lora_weights(dir), and the eval images at 2 steps are
    the same both ways: eval's PNG pixels (uint8) are equal, the pipeline's own float images agree to 1e-4 (fused
    W + s B A against the user's unfused W x + s B (A x) round differently, ~1e-6 here), and eval's pixels are the
    pipeline's image rounded (within 1 of 255 x image: its sampler is the pipeline's, tests/unit/models/test_flux_family.py)."""
    from diffusers import FluxPipeline
    from safetensors import safe_open

    spec = get_family("flux")
    targets = list(spec.lora_targets)
    deltas = trained_lora(tiny_flux, "flux", targets, tmp_path / "lora")
    assert any(n.startswith("single_transformer_blocks.") for n in deltas)  # attn.to_q/k/v match there too
    for target in targets:
        assert any(n.endswith(target) for n in deltas), target
    with safe_open(str(tmp_path / "lora" / models.LORA_WEIGHTS), framework="pt") as handle:
        keys = list(handle.keys())
    assert keys and all(k.startswith("transformer.") and (".lora_A." in k or ".lora_B." in k) for k in keys)
    base = models.load_pipeline({"family": "flux", "path": str(tiny_flux)})
    ours = models.load_pipeline({"family": "flux", "path": str(tiny_flux)}, lora_dir=str(tmp_path / "lora"))
    assert_fused(ours.transformer, base.transformer, deltas)
    plain = FluxPipeline.from_pretrained(str(tiny_flux), dtype=torch.float32)
    plain.set_progress_bar_config(disable=True)
    plain.load_lora_weights(str(tmp_path / "lora"))  # what a user does: unfused, the adapter active
    placed = {n for n, m in plain.transformer.named_modules() if getattr(m, "lora_A", None)}
    assert placed == set(deltas)
    (ours_ours, ours_pipe), (plain_ours, plain_pipe) = flux_eval_images(ours), flux_eval_images(plain)
    base_ours, _ = flux_eval_images(base)
    assert (ours_ours.int() - base_ours.int()).abs().max() > 10  # the LoRA changes the images
    assert ours_ours.dtype == torch.uint8 and torch.equal(ours_ours, plain_ours)
    torch.testing.assert_close(ours_pipe, plain_pipe, atol=1e-4, rtol=0)
    assert ((ours_ours.float() - 255 * ours_pipe.permute(0, 2, 3, 1)).abs() <= 1.0).all()


@torch.no_grad()
def test_a_flux_lora_round_trips_through_load_lora_into_and_check_init_lora(tiny_flux, tmp_path):
    """The saved FLUX LoRA as model.init_lora: check_init_lora accepts it for train.lora's rank and flux's targets
    (and names a target it lacks, a layer train.lora.targets does not name, another rank); load_lora_into puts back exactly the saved A and B."""
    from rewardloop.models.lora import check_init_lora, load_lora_into

    targets = list(get_family("flux").lora_targets)
    trained_lora(tiny_flux, "flux", targets, tmp_path / "lora")
    model_cfg = {"family": "flux", "path": str(tiny_flux), "init_lora": str(tmp_path / "lora")}
    check_init_lora(model_cfg, {"lora": {"rank": 4, "alpha": 8, "targets": targets}})
    with pytest.raises(models.ModelError, match=r"has no layers for train\.lora\.targets proj_mlp$"):
        check_init_lora(model_cfg, {"lora": {"rank": 4, "alpha": 8, "targets": [*targets, "proj_mlp"]}})
    with pytest.raises(models.ModelError, match=r"adapts transformer_blocks\.0\.ff_context\.net\.2 \(1 layer\(s\) in all\), "
                                                r"which train\.lora\.targets .* does not name$"):
        check_init_lora(model_cfg, {"lora": {"rank": 4, "alpha": 8, "targets": targets[:-1]}})
    with pytest.raises(models.ModelError, match=r"rank 4, but train\.lora\.rank is 8"):
        check_init_lora(model_cfg, {"lora": {"rank": 8, "alpha": 8, "targets": targets}})
    saved = models.load_pipeline({"family": "flux", "path": str(tiny_flux)}).transformer
    attach_lora(saved, {"rank": 4, "alpha": 8, "targets": targets})
    load_lora_into(saved, "flux", str(tmp_path / "lora"))
    fresh = models.load_pipeline({"family": "flux", "path": str(tiny_flux)}).transformer
    attach_lora(fresh, {"rank": 4, "alpha": 8, "targets": targets})
    gen = torch.Generator().manual_seed(0)  # trained_lora's draws, in the same module order
    for name, module in fresh.named_modules():
        if "default" in getattr(module, "lora_A", {}):
            a, b = module.lora_A["default"].weight, module.lora_B["default"].weight
            a.copy_(torch.randn(a.shape, generator=gen) * 0.1)
            b.copy_(torch.randn(b.shape, generator=gen) * 0.1)
    loaded, expected = dict(saved.named_parameters()), dict(fresh.named_parameters())
    lora_names = [n for n in expected if ".lora_" in n]
    assert lora_names and all(torch.equal(loaded[n], expected[n]) for n in lora_names)
