"""Training in 2 processes (`accelerate launch`, DDP over gloo on the CPU) equals 1 process with the
same global batch, and resumes from its in-stage checkpoint. Real launches, real peft/accelerate steps."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from rewardloop.runtime import launch
from rewardloop.config import stage_config
from rewardloop.models.loading import LORA_WEIGHTS
from rewardloop.stages import train

from test_training import pair_files, run_cfg  # noqa: F401  (fixtures: tiny model rollouts, pairs)

pytestmark = pytest.mark.workflow  # launches processes: slower than a unit test


def train_once(run_cfg, pair_files, out, processes, batch_size):  # noqa: F811
    cfg = stage_config(run_cfg, "seed", "model", "train", "device")
    cfg["train"].update(steps=4, checkpointing_steps=2, batch_size=batch_size, num_processes=processes)
    kwargs = dict(cfg=cfg, iteration=0, signal_path=str(pair_files / "pairs.parquet"),
                  latents_path=str(pair_files / "latents.safetensors"), init_lora_dir=None,
                  out_dir=str(out / "train"), state_dir=str(out / "state"), metrics_path=str(out / "train.json"),
                  threads=1, progress=False)
    if processes == 1:
        train.run(**kwargs)
    else:
        launch.run_launched(kwargs, processes, "no", out / "state")
    return load_file(out / "train" / LORA_WEIGHTS), json.loads((out / "train.json").read_text())


def test_two_processes_equal_one_with_the_same_global_batch_and_resume(run_cfg, pair_files, tmp_path):  # noqa: F811
    single, single_metrics = train_once(run_cfg, pair_files, tmp_path / "one", 1, batch_size=8)
    double, double_metrics = train_once(run_cfg, pair_files, tmp_path / "two", 2, batch_size=4)
    assert double_metrics["processes"] == 2 and single_metrics["processes"] == 1
    assert len(double_metrics["history"]) == 4  # one history (rank 0's), not one per rank
    assert single.keys() == double.keys()
    assert max(single[k].abs().max().item() for k in single) > 1e-4  # training moved the LoRA
    # Equal up to float reduction order (gloo's all-reduce vs one batched backward). Adam's normalised
    # steps can turn that into ~lr on a weight whose gradient is ~0, so compare each tensor as a whole:
    # lora_B starts at zero, so its norm is the training update itself.
    for key in single:
        assert (double[key] - single[key]).norm() <= 1e-3 * single[key].norm(), key
    losses = [h["train/loss"] for h in single_metrics["history"]], [h["train/loss"] for h in double_metrics["history"]]
    assert losses[1] == pytest.approx(losses[0], rel=1e-3)  # step 0 exact, then float drift

    # The 2-process run left its step-2 state; a rerun of the same job resumes there and ends alike.
    (tmp_path / "two" / "train" / LORA_WEIGHTS).unlink()
    resumed, resumed_metrics = train_once(run_cfg, pair_files, tmp_path / "two", 2, batch_size=4)
    assert resumed_metrics["resumed_from_step"] == 2 and len(resumed_metrics["history"]) == 4
    for key in double:
        torch.testing.assert_close(resumed[key], double[key], rtol=1e-5, atol=1e-7)
