"""The real snakemake workflow on the embedded tiny FLUX.1-dev (configs/tiny_flux_{grpo,nft,awm}.yaml).

The model is :func:`rewardloop.models.tiny.flux.build_tiny_flux` on a small pretraining budget
(plumbing, not learning: the recipes' budget is measured in docs/flow-rl.md), scored by JPEG
compressibility (any image has one; its color_match is 0); each objective runs one
iteration of its recipe, generate -> score -> advantages -> train -> export -> eval, at FLUX.1-dev's
embedded guidance 3.5, and the exported LoRA loads into a plain diffusers ``FluxPipeline``.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from rewardloop.config import deep_merge

from workflow_helpers import ROOT, snakemake, tiny_overlay, write_overlay

pytestmark = pytest.mark.workflow

OBJECTIVES = ("grpo", "nft", "awm")


@pytest.fixture(scope="module")
def tiny_flux_model(tmp_path_factory):
    """The pretrained tiny FLUX on a small budget (FLUX's 512 T5 tokens make a step costly: small batches)."""
    from rewardloop.models.tiny.flux import build_tiny_flux

    out = tmp_path_factory.mktemp("models") / "tiny-flux"
    stats = build_tiny_flux(out, seed=0, vae_steps=20, unet_steps=4, batch_size=8, vae_batch_size=8, progress=False)
    assert stats["family"] == "flux" and json.loads((out / "build_info.json").read_text()) == stats
    return out


@pytest.fixture(scope="module")
def eval_prompts(tmp_path_factory):
    """Four of the held-out prompts (the eval of the base and of iteration 0 samples each once)."""
    path = tmp_path_factory.mktemp("prompts") / "eval.txt"
    path.write_text("\n".join((ROOT / "resources/prompts/eval.txt").read_text().splitlines()[:4]) + "\n")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_flux_model, eval_prompts):
    """One iteration of each recipe (as `--configfile configs/tiny_flux_<objective>.yaml`) on a small budget."""
    workdirs = {}
    for name in OBJECTIVES:
        work = tmp_path_factory.mktemp(f"run_flux_{name}")
        recipe = yaml.safe_load((ROOT / f"configs/tiny_flux_{name}.yaml").read_text())
        overlay = tiny_overlay(tiny_flux_model, iterations=1, tracking={"enabled": False},
                               prompts={"eval": str(eval_prompts)},
                               generate={"prompts_per_iteration": 2, "images_per_prompt": 4, "steps": 4,
                                         "sde": {"num_sde_steps": 2, "window_range": [0, 4]}},
                               train={"batch_size": 4, "gradient_accumulation_steps": 1})
        del overlay["train"]["steps"]  # the advantage objectives' update count follows from the samples
        config = deep_merge(recipe, overlay)
        # The briefly pretrained model's images show neither named colour: color_match scores every
        # rollout 0, every group ties and there is no advantage to train on. A reward of any image
        # (DDPO's JPEG compressibility) keeps the plumbing test on the objectives.
        config["rewards"] = {"jpeg_compressibility": 1.0}
        write_overlay(work, config)
        snakemake(work)
        workdirs[name] = work
    return workdirs


@pytest.mark.parametrize("name", OBJECTIVES)
def test_flux_iteration_writes_its_artifacts(runs, name):
    from rewardloop.artifacts import read_tensors

    it = runs[name] / "results/iter_000"
    samples = pq.read_table(it / "samples.parquet").to_pandas()
    assert len(samples) == 8 and set(samples.guidance_scale) == {3.5}
    adv = pq.read_table(it / "advantages.parquet").to_pandas()
    assert set(adv.sample_id) <= set(samples.sample_id) and not (it / "pairs.parquet").exists()
    tensors = read_tensors(it / "latents.safetensors")
    trajectory = {key for key in tensors if key.startswith("trajectory/")}
    if name == "grpo":  # the recorded SDE steps GRPO trains on: 2 of 4, on the unpacked [16, 8, 8] latents
        sid = samples.sample_id[0]
        assert tensors[f"trajectory/{sid}/latents"].shape == (2, 16, 8, 8)
        assert tensors[f"trajectory/{sid}/log_probs"].shape == (2,)
        assert len(trajectory) == 8 * len({key.rsplit("/", 1)[1] for key in trajectory})
    else:  # NFT and AWM train on the clean latents of ODE rollouts
        assert not trajectory
    train = json.loads((it / "metrics/train.json").read_text())
    assert train["history"] and all(map(lambda row: row["train/loss"] == row["train/loss"], train["history"]))
    assert (it / "checkpoint/pytorch_lora_weights.safetensors").is_file()
    assert len(pq.read_table(it / "eval.parquet")) == 4  # 4 prompts x 1 seed
    assert (runs[name] / "results/base/eval.parquet").is_file()


@pytest.mark.parametrize("name", OBJECTIVES)
def test_exported_lora_loads_into_plain_diffusers_flux(runs, tiny_flux_model, name):
    import torch
    from diffusers import FluxPipeline

    pipe = FluxPipeline.from_pretrained(tiny_flux_model)
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(prompt="a red circle on a blue background", num_inference_steps=3, height=32, width=32,
                  guidance_scale=3.5, output_type="np")
    before = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
    pipe.load_lora_weights(str(runs[name] / "results/iter_000/checkpoint"))
    after = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
    assert after.shape == before.shape == (1, 32, 32, 3) and abs(after - before).max() > 0
