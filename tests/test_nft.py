"""DiffusionNFT: the loss by hand, and one training iteration through the stage functions."""

from __future__ import annotations

import json

import pytest
import torch

from rewardloop.artifacts import read_tensors
from rewardloop.objectives.nft import nft_loss, optimality
from rewardloop.stages import advantages, generate, score, train

from test_grpo import _cfg


def test_nft_loss_by_hand():
    v_theta, v_old, target = torch.full((2, 1, 2, 2), 2.0), torch.zeros(2, 1, 2, 2), torch.ones(2, 1, 2, 2)
    r = torch.tensor([1.0, 0.25])
    loss = nft_loss(v_theta, v_old, target, r, beta=0.5)
    # v_pos = 1, v_neg = -1: sample 0 -> (1-1)^2 = 0; sample 1 -> 0.25*0 + 0.75*(-1-1)^2 = 3
    assert loss.tolist() == pytest.approx([0.0, 3.0])
    assert optimality(torch.tensor([-5.0, 0.0, 2.5, 9.0]), 5.0).tolist() == pytest.approx([0.0, 0.5, 0.75, 1.0])


def test_nft_iteration_trains_the_lora(tiny_sd3_model, tmp_path):
    cfg = _cfg(tiny_sd3_model, loss="nft")
    folder = tmp_path / "iter_000"
    generate.run(cfg, 0, None, folder / "samples.parquet", folder / "latents.safetensors", folder / "g.json",
                 progress=False, record_sde=False)
    assert not any(k.startswith("trajectory/") for k in read_tensors(folder / "latents.safetensors"))
    score.run(cfg, folder / "samples.parquet", folder / "scores.parquet", folder / "s.json", progress=False)
    advantages.run(cfg, folder / "scores.parquet", folder / "advantages.parquet", folder / "a.json")
    train.run(cfg, 0, folder / "advantages.parquet", folder / "latents.safetensors", None, folder / "train",
              folder / "state", folder / "t.json", progress=False)
    metrics = json.loads((folder / "t.json").read_text())
    assert metrics["steps"] >= 1 and all(torch.isfinite(torch.tensor(h["train/loss"])) for h in metrics["history"])
    lora = read_tensors(folder / "train/pytorch_lora_weights.safetensors")
    assert any(v.abs().sum() > 0 for k, v in lora.items() if "lora_B" in k)
