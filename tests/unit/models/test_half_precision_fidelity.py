"""Our eval sampler in the recipes' precision (bf16; fp16 where a recipe uses it) against the family's own
diffusers pipeline, on each family's published-layout tiny replica, with and without an exported LoRA that the
pipeline loads itself (``load_lora_weights``, unfused: what a user does).

The comparison and its bound are bench/pipeline_fidelity.py's (bench/gpu_slot.py runs the same at full size on
a GPU): every denoiser call's timestep and conditioning bit-identical to the pipeline's, the first latent input
too; the later latent inputs and the images no further from the same pipeline run in fp32 than the
half-precision pipeline's own are, within 25 % (+0.25 pixel level for eval's uint8 PNGs). The exact per-call
check found the SD3 timestep cast (792 where the pipeline hands 790.37) and that our SDXL sampler guided
against the empty prompt's encoding where the pipeline guides against zeros (``force_zeros_for_empty_prompt``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from rewardloop.models.replicas import build_replica

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import pipeline_fidelity  # noqa: E402

torch.set_num_threads(1)
RESOLUTION = 64
# (family, variant, precision, steps, guidance): each family at its recipes' precision, the UNet families also in bf16
CASES = [
    ("sd15", None, torch.float16, 6, 7.5),
    ("sd15", None, torch.bfloat16, 6, 7.5),
    ("sdxl", None, torch.float16, 6, 5.0),
    ("sd3", "medium", torch.bfloat16, 10, 4.5),
    ("flux", "dev", torch.bfloat16, 6, 3.5),
    ("flux", "schnell", torch.bfloat16, 4, 0.0),
]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    built = {}

    def replica(family, variant):
        if (family, variant) not in built:
            folder = tmp_path_factory.mktemp(f"{family}-{variant}")
            build_replica(family, folder / "model", variant=variant)
            built[family, variant] = folder / "model"
        return built[family, variant]

    return replica


@pytest.mark.parametrize("with_lora", [False, True], ids=["base", "exported-lora"])
@pytest.mark.parametrize("family, variant, dtype, steps, guidance", CASES,
                         ids=[f"{f}-{v or 'default'}-{str(d)[6:]}" for f, v, d, _, _ in CASES])
def test_eval_sampler_in_half_precision_is_the_pipelines(replicas, tmp_path, family, variant, dtype, steps,
                                                         guidance, with_lora):
    replica = replicas(family, variant)
    lora_dir = pipeline_fidelity.random_lora(replica, family, tmp_path / "lora") if with_lora else None
    figures = pipeline_fidelity.compare(replica, family, dtype, steps, guidance, RESOLUTION, lora_dir)
    print("latent input error vs the fp32 pipeline, ours / the pipeline's, by step:",
          [f"{a:.3g}/{b:.3g}" for a, b in figures["latent_errors"]])
    print(f"mean pixel difference to the fp32 pipeline: ours {figures['ours_pixel_off']:.3f}, the pipeline's "
          f"{figures['pipeline_pixel_off']:.3f}; between them {figures['between_pixel']:.3f}")
    assert len(figures["latent_errors"]) == steps - 1  # one denoiser call per step (CFG batched), the first exact


def test_the_comparison_finds_a_timestep_cast(replicas, monkeypatch):
    """The check fails where the SD3 adapter hands the transformer a half-precision timestep (the bug it found)."""
    from rewardloop.models.families import sd3

    replica = replicas("sd3", "medium")
    predict = sd3.SD3.predict

    def cast_timestep(self, denoiser, latents, timestep, cond, **kwargs):  # the adapter as it was before stop 48
        return predict(self, denoiser, latents, torch.as_tensor(timestep).to(denoiser.dtype), cond, **kwargs)

    monkeypatch.setattr(sd3.SD3, "predict", cast_timestep)
    with pytest.raises(AssertionError, match="timestep"):
        pipeline_fidelity.compare(replica, "sd3", torch.bfloat16, 10, 4.5, RESOLUTION)
