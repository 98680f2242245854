"""Every layer of an exported LoRA lands where users load it: our sampler (fused) and a plain diffusers
pipeline (``load_lora_weights``), on the published-layout replicas of each family.

The expected weights are the base weights plus (alpha / rank) * B @ A of the trained adapter, computed
here from the adapter's own tensors. diffusers reads a LoRA file's key format off one key and skips
the layers it cannot place with a warning, so a file mixing lora.down/up and lora_A/B names (what SD3
LoRAs with the recipes' add_*_proj targets were saved as) loses layers silently: that must not pass.
"""

from __future__ import annotations

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
