"""FSDP (``train.distributed: fsdp``, torch's fully_shard) in 2 processes over gloo on the CPU equals DDP with the
same global batch, writes the usual files whole, and resumes from its in-stage checkpoint (and from DDP's):
dpo on the tiny SD1.5 (LoRA and full fine-tuning), grpo on the tiny SD3. Real launches, as in
test_multiprocess_training.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from rewardloop.artifacts import write_tensors
from rewardloop.config import stage_config
from rewardloop.models.files import FULL_UNET_WEIGHTS
from rewardloop.models.loading import LORA_WEIGHTS
from rewardloop.runtime import launch
from rewardloop.training.state import STATE_FILE

from training_inputs import pair_files, run_cfg  # noqa: F401  (fixtures: tiny model rollouts, pairs)

pytestmark = pytest.mark.workflow  # launches processes: slower than a unit test


def launched(cfg, signal_path, latents_path, out, weights=LORA_WEIGHTS):
    """The train stage launched in 2 processes; (the written weights, the metrics)."""
    kwargs = dict(cfg=cfg, iteration=0, signal_path=str(signal_path), latents_path=str(latents_path),
                  init_lora_dir=None, out_dir=str(out / "train"), state_dir=str(out / "state"),
                  metrics_path=str(out / "train.json"), threads=1, progress=False)
    launch.run_launched(kwargs, 2, "no", out / "state")
    return load_file(out / "train" / weights), json.loads((out / "train.json").read_text())


def assert_same_training(a: dict, b: dict, what) -> None:
    """Each tensor within 1e-3 of its norm, the tolerance of DDP against one process
    (test_multiprocess_training.py). Both runs compute each rank's gradient alike and differ in the reduction
    only (DDP all-reduces a bucket, FSDP reduce-scatters per block and divides by the world size before
    summing), by float rounding, which Adam's normalised steps carry on (a weight whose gradient is ~0 moves
    by ~lr either way) and DPO's beta 2000 sharpens. Measured: 6.3e-5 (dpo), 1.3e-5 (dpo resumed from DDP's
    checkpoint), 4.8e-6 (grpo) of a tensor's norm at worst."""
    assert a.keys() == b.keys()
    for key in a:
        assert (a[key] - b[key]).norm() <= 1e-3 * a[key].norm() + 1e-8, (what, key)


def dpo_cfg(run_cfg, distributed, **train):  # noqa: F811
    cfg = stage_config(run_cfg, "seed", "model", "train", "device")
    cfg["train"].update({"steps": 4, "checkpointing_steps": 2, "batch_size": 4, "num_processes": 2,
                         "distributed": distributed, **train})
    return cfg


def test_fsdp_equals_ddp_writes_the_usual_lora_and_resumes_from_either_checkpoint(run_cfg, pair_files, tmp_path):  # noqa: F811
    files = pair_files / "pairs.parquet", pair_files / "latents.safetensors"
    ddp, ddp_metrics = launched(dpo_cfg(run_cfg, "ddp"), *files, tmp_path / "ddp")
    sharded, metrics = launched(dpo_cfg(run_cfg, "fsdp"), *files, tmp_path / "fsdp")
    assert metrics["processes"] == 2 and len(metrics["history"]) == 4
    assert max(ddp[k].abs().max().item() for k in ddp) > 1e-4  # training moved the LoRA
    assert_same_training(ddp, sharded, "dpo")
    assert [h["train/loss"] for h in metrics["history"]] == pytest.approx(
        [h["train/loss"] for h in ddp_metrics["history"]], rel=1e-3)
    # The checkpoint holds whole tensors, as DDP's does (same names, same shapes).
    ddp_state, fsdp_state = (load_file(tmp_path / run / "state" / STATE_FILE) for run in ("ddp", "fsdp"))
    assert {k: v.shape for k, v in ddp_state.items()} == {k: v.shape for k, v in fsdp_state.items()}

    # Stopped after its step-2 checkpoint (here: the finished job's LoRA removed), the FSDP rerun resumes there
    # and ends on the same LoRA.
    (tmp_path / "fsdp" / "train" / LORA_WEIGHTS).unlink()
    resumed, resumed_metrics = launched(dpo_cfg(run_cfg, "fsdp"), *files, tmp_path / "fsdp")
    assert resumed_metrics["resumed_from_step"] == 2 and len(resumed_metrics["history"]) == 4
    for key in sharded:
        torch.testing.assert_close(resumed[key], sharded[key], rtol=1e-5, atol=1e-7)
    # DDP's checkpoint is read alike. (A job whose train.distributed changed starts its iteration over, as for any
    # changed train key: the state's fingerprint holds the config; here DDP's state gets the FSDP job's.)
    fingerprint = state_meta(tmp_path / "fsdp" / "state" / STATE_FILE)["fingerprint"]
    meta = {**state_meta(tmp_path / "ddp" / "state" / STATE_FILE), "fingerprint": fingerprint}
    (tmp_path / "across" / "state").mkdir(parents=True)
    write_tensors(ddp_state, tmp_path / "across" / "state" / STATE_FILE, meta={"rewardloop_state": meta})
    across, across_metrics = launched(dpo_cfg(run_cfg, "fsdp"), *files, tmp_path / "across")
    assert across_metrics["resumed_from_step"] == 2
    assert_same_training(ddp, across, "dpo resumed under fsdp from ddp's checkpoint")


def state_meta(path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return json.loads(fh.metadata()["rewardloop_state"])


def test_fsdp_full_fine_tuning_writes_the_whole_unet_as_ddp_does(run_cfg, pair_files, tmp_path):  # noqa: F811
    files = pair_files / "pairs.parquet", pair_files / "latents.safetensors"
    full = dict(adapter="none", steps=2, learning_rate=1e-5, gradient_checkpointing=True)
    ddp, _ = launched(dpo_cfg(run_cfg, "ddp", **full), *files, tmp_path / "ddp", FULL_UNET_WEIGHTS)
    sharded, _ = launched(dpo_cfg(run_cfg, "fsdp", **full), *files, tmp_path / "fsdp", FULL_UNET_WEIGHTS)
    base = load_file(run_cfg["model"]["path"] + "/" + FULL_UNET_WEIGHTS)
    assert sharded.keys() == base.keys()  # the whole UNet, diffusers' names: no FSDP prefixes, no shards
    assert all(sharded[k].shape == base[k].shape for k in base)
    assert (tmp_path / "fsdp" / "train" / "unet" / "config.json").is_file()
    moved = {k: ddp[k] - base[k] for k in base}
    assert max(d.abs().max().item() for d in moved.values()) > 0  # training changed the UNet
    # The update itself compared (not the weights it is small beside), as the LoRA's: within 1e-3 of its norm, plus
    # the weights' own fp32 rounding (~1e-9 an entry; measured: 1.2e-4 of the update at worst).
    for key in base:
        assert (sharded[key] - ddp[key]).norm() <= 1e-3 * moved[key].norm() + 1e-6, key


def test_fsdp_grpo_equals_ddp(tiny_sd3_model, tmp_path):
    """Flow-GRPO with its KL to the reference (the LoRA disabled) on the tiny SD3's rollouts."""
    from training_inputs import grpo_config

    from rewardloop.stages import advantages, generate, score

    cfg = grpo_config(tiny_sd3_model, loss="grpo", batch_size=2, checkpointing_steps=1,
                      num_processes=2, grpo={"kl_beta": 0.04, "clip_range": 0.2})
    folder = tmp_path / "rollouts"
    generate.run(cfg, 0, None, folder / "samples.parquet", folder / "latents.safetensors", folder / "g.json",
                 progress=False, record_sde=True)
    score.run(cfg, folder / "samples.parquet", folder / "scores.parquet", folder / "s.json", progress=False)
    advantages.run(cfg, folder / "scores.parquet", folder / "advantages.parquet", folder / "a.json",
                   keep_tied_groups=False)
    job = stage_config(cfg, "seed", "model", "train", "device", "advantages")
    files = folder / "advantages.parquet", folder / "latents.safetensors"
    ddp, ddp_metrics = launched({**job, "train": {**job["train"], "distributed": "ddp"}}, *files, tmp_path / "ddp")
    sharded, metrics = launched({**job, "train": {**job["train"], "distributed": "fsdp"}}, *files, tmp_path / "fsdp")
    assert metrics["steps"] == ddp_metrics["steps"] >= 2
    assert max(ddp[k].abs().max().item() for k in ddp) > 1e-6
    assert_same_training(ddp, sharded, "grpo")
    first = ddp_metrics["history"][0], metrics["history"][0]
    assert first[1]["train/kl_loss"] == pytest.approx(first[0]["train/kl_loss"], rel=1e-5, abs=1e-9)
