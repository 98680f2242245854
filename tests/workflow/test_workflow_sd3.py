"""The real snakemake workflow on configs/tiny_sd3_grpo.yaml: generate -> score -> advantages -> train."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from rewardloop.config import deep_merge

from workflow_helpers import ROOT, snakemake, tiny_overlay, write_overlay

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_sd3_model):
    """2 iterations of the recipe (as `--configfile configs/tiny_sd3_grpo.yaml`) on a small budget, trained in 2
    processes (accelerate launch, gloo) with the global batch of 8 a single process would take."""
    work = tmp_path_factory.mktemp("run_sd3")
    recipe = yaml.safe_load((ROOT / "configs/tiny_sd3_grpo.yaml").read_text())
    overlay = tiny_overlay(tiny_sd3_model, tracking={"enabled": False},
                           generate={"prompts_per_iteration": 4, "images_per_prompt": 4, "steps": 4,
                                     "sde": {"num_sde_steps": 2, "window_range": [0, 4]}},
                           train={"batch_size": 4, "num_processes": 2, "gradient_accumulation_steps": 1})
    del overlay["train"]["steps"]  # GRPO's update count follows from the samples and recorded steps
    write_overlay(work, deep_merge(recipe, overlay))
    snakemake(work)
    return work


def test_grpo_dag_replaces_pairs_with_advantages(workdir):
    results = workdir / "results"
    for it in ("iter_000", "iter_001"):
        assert not (results / it / "pairs.parquet").exists()
        adv = pq.read_table(results / it / "advantages.parquet").to_pandas()
        samples = pq.read_table(results / it / "samples.parquet").to_pandas()
        assert set(adv.sample_id) <= set(samples.sample_id) and len(samples) == 16
        assert {"advantage", "group_mean", "group_std"} <= set(adv.columns)
        train = json.loads((results / it / "metrics/train.json").read_text())
        assert train["processes"] == 2
        for key in ("train/loss", "train/kl_loss", "train/clipfrac", "train/approx_kl",
                    "train/log_prob_mean_abs_diff"):
            assert key in train["history"][0]
        assert "train/zero_std_ratio" in json.loads((results / it / "metrics/advantages.json").read_text())
        assert (results / it / "checkpoint/pytorch_lora_weights.safetensors").is_file()
    assert (results / "iter_001/eval.parquet").is_file()


def test_exported_lora_loads_into_plain_diffusers_sd3(workdir, tiny_sd3_model):
    import torch
    from diffusers import StableDiffusion3Pipeline

    pipe = StableDiffusion3Pipeline.from_pretrained(tiny_sd3_model, text_encoder_3=None, tokenizer_3=None)
    pipe.set_progress_bar_config(disable=True)
    kwargs = dict(prompt="a red circle on a blue background", num_inference_steps=3, height=32, width=32,
                  output_type="np", max_sequence_length=0)
    before = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
    pipe.load_lora_weights(str(workdir / "results/iter_001/checkpoint"))
    after = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
    assert after.shape == before.shape and abs(after - before).max() > 0


def test_gated_sd3_hub_model_requires_hf_token(tmp_path):
    """A hub SD3.5 needs HF_TOKEN (passed by `envvars:`); the DAG has advantages and no pairs."""
    import os
    import subprocess

    from workflow_helpers import SNAKEMAKE

    write_overlay(tmp_path, {
        "model": {"family": "sd3", "path": "stabilityai/stable-diffusion-3.5-medium", "build_tiny": False},
        "prompts": {"train": str(ROOT / "resources/prompts/train.txt"), "eval": str(ROOT / "resources/prompts/eval.txt")},
        "train": {"loss": "grpo"}, "tracking": {"enabled": False},
    })
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile",
           str(tmp_path / "test.yaml"), "-n", "--cores", "1"]
    # online mode (a dry run downloads nothing): offline, an uncached hub id is refused at startup
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_HUB_OFFLINE")}
    missing = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert missing.returncode != 0 and "HF_TOKEN" in missing.stdout + missing.stderr
    planned = subprocess.run(cmd, capture_output=True, text=True, env={**env, "HF_TOKEN": "hf_test"})
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert "advantages" in planned.stdout and "pairs" not in planned.stdout
    assert "hf_test" not in planned.stdout + planned.stderr
