"""Training inputs shared by the tests of training/, objectives/ and the workflow tests that train:
validated configs, synthetic pairs, the tiny model's DPO rollouts and pairs (module fixtures), Flow-GRPO's
config on a tiny SD3 model, and a Pick-a-Pic file of rendered synthetic images.

``run_cfg`` and ``pair_files`` are fixtures: a test module uses them after
``from training_inputs import pair_files, run_cfg  # noqa: F401``.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from rewardloop import config as cfgmod
from rewardloop.config import load
from rewardloop.models.tiny import synthetic
from rewardloop.objectives.preference import PairData
from rewardloop.stages import generate, pairs, score

from workflow_helpers import ROOT


def full_cfg(**train_overrides) -> dict:
    """A validated config (schema defaults filled) with ``train_overrides``."""
    prompts = {k: str(ROOT / f"resources/prompts/{k}.txt") for k in ("train", "eval")}
    return cfgmod.validate({"train": train_overrides, "prompts": prompts})


def synthetic_pairs(n=6, seed=0, dim=64) -> PairData:
    gen = torch.Generator().manual_seed(seed)
    return PairData(
        chosen=torch.randn(n, 4, 8, 8, generator=gen),
        rejected=torch.randn(n, 4, 8, 8, generator=gen),
        embeds=torch.randn(n, 8, dim, generator=gen),
        empty={"prompt_embeds": torch.zeros(8, dim)},
    )


def grpo_config(model, sde: dict | None = None, **train) -> dict:
    """configs/tiny_sd3_grpo.yaml on ``model`` (a tiny model folder), 3 prompts x 4 images of 4 steps, 2 SDE steps
    (``sde``: other generate.sde keys)."""
    overrides = {
        "model": {"path": str(model), "build_tiny": False},
        "prompts": {"train": str(ROOT / "resources/prompts/train.txt"), "eval": str(ROOT / "resources/prompts/eval.txt")},
        "generate": {"prompts_per_iteration": 3, "images_per_prompt": 4, "steps": 4, "batch_size": 16,
                     "sde": {"num_sde_steps": 2, "window_range": [0, 4], **(sde or {})}},
        "advantages": {"globalize_reward_std": False},
        "train": {"batch_size": 6, "gradient_accumulation_steps": 1, "checkpointing_steps": 100,
                  "learning_rate": 1e-3, **train},
    }
    return load(ROOT / "configs/tiny_sd3_grpo.yaml", overrides)


# --- the tiny SD1.5 model's rollouts, scores and pairs (DPO), once per test module ------------------

@pytest.fixture(scope="module")
def run_cfg(tiny_model, repo_root):
    cfg = cfgmod.validate(
        {
            "model": {"path": str(tiny_model), "build_tiny": False},
            "prompts": {
                "train": str(repo_root / "resources/prompts/train.txt"),
                "eval": str(repo_root / "resources/prompts/eval.txt"),
            },
            "generate": {"prompts_per_iteration": 8, "images_per_prompt": 4, "steps": 5, "resolution": 32,
                         "batch_size": 32},
            "train": {"dpo": {"beta": 2000}, "learning_rate": 1e-3, "steps": 24, "batch_size": 8, "lr_scheduler": "constant",
                      "checkpointing_steps": 5, "weight_decay": 0.0},
            "device": "cpu",
        }
    )
    return cfg


@pytest.fixture(scope="module")
def pair_files(run_cfg, tmp_path_factory):
    out = tmp_path_factory.mktemp("iter")
    gen_cfg = cfgmod.stage_config(run_cfg, "seed", "model", "prompts", "generate", "device")
    generate.run(gen_cfg, 0, None, out / "samples.parquet", out / "latents.safetensors", out / "g.json",
                 threads=2, progress=False)
    score.run(cfgmod.stage_config(run_cfg, "rewards", "score"), out / "samples.parquet", out / "scores.parquet",
              out / "s.json", progress=False)
    pairs.run(cfgmod.stage_config(run_cfg, "pairs"), out / "scores.parquet", out / "pairs.parquet", out / "p.json")
    return out


# --- offline pairs: Pick-a-Pic's layout --------------------------------------------------------------

def png(array: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def write_pickapic(path: Path, n: int = 6, size: int = 48) -> pd.DataFrame:
    """Rendered synthetic images in the Pick-a-Pic layout; labels 1, 0 and one tie."""
    rng = np.random.default_rng(0)
    prompts = synthetic.split_prompts(0)[0]
    first, captions = synthetic.make_batch(rng, n, prompts, size)
    second, _ = synthetic.make_batch(rng, n, prompts, size)
    labels = [1.0, 0.0, 0.5, 1.0, 0.0, 1.0][:n]
    frame = pd.DataFrame({"caption": captions, "jpg_0": [png(a) for a in first], "jpg_1": [png(a) for a in second],
                          "label_0": labels, "label_1": [1 - x for x in labels]})
    frame.to_parquet(path)
    return frame
