"""Flow-GRPO on the tiny SD3 model: stage functions end to end, log-prob alignment, determinism; the loss on
the policy's device, PPO's clip boundary and the startup check of each step strategy."""

from __future__ import annotations

import math

import pytest
import torch

from rewardloop.artifacts import read_table, read_tensors
from rewardloop.config import load
from rewardloop.objectives import get_objective
from rewardloop.objectives.grpo import clipped_policy_loss, kl_to_reference
from rewardloop.stages import advantages, generate, score, train

from meta_device import META, meta_items, policy_on  # noqa: F401  (meta_items: a fixture)
from objective_inputs import DDIMStep, FlowStep, rollout_inputs
from training_inputs import grpo_config
from workflow_helpers import ROOT


def test_clipped_policy_loss_by_hand():
    old = torch.tensor([0.0, 0.0, 0.0, 0.0])
    new = torch.log(torch.tensor([1.5, 0.5, 1.05, 0.95]))
    adv = torch.tensor([1.0, 1.0, -2.0, -2.0])
    loss, clipfrac, approx_kl = clipped_policy_loss(new, old, adv, clip_range=0.1)
    # per sample max(-A r, -A clip(r)): -1.1, -0.5, 2.1, 1.9  (ratios 1.5 -> 1.1; 0.5 -> 0.9; 1.05; 0.95)
    assert loss.item() == pytest.approx((-1.1 - 0.5 + 2.1 + 1.9) / 4, abs=1e-6)
    assert clipfrac.item() == pytest.approx(0.5)
    assert approx_kl.item() == pytest.approx(0.5 * float((new**2).mean()), rel=1e-6)


def test_kl_to_reference_by_hand():
    mean = torch.zeros(2, 1, 2, 2)
    ref = torch.tensor([1.0, 2.0]).view(2, 1, 1, 1).expand(2, 1, 2, 2)
    kl = kl_to_reference(mean, ref, torch.tensor([0.5, 2.0]))
    assert kl.tolist() == pytest.approx([1.0 / (2 * 0.25), 4.0 / (2 * 4.0)])


def _iteration(cfg, work, it, lora_dir=None):
    folder = work / f"iter_{it:03d}"
    generate.run(cfg, it, lora_dir, folder / "samples.parquet", folder / "latents.safetensors",
                 folder / "m_generate.json", progress=False, record_sde=True)
    score.run(cfg, folder / "samples.parquet", folder / "scores.parquet", folder / "m_score.json", progress=False)
    advantages.run(cfg, folder / "scores.parquet", folder / "advantages.parquet", folder / "m_adv.json")
    train.run(cfg, it, folder / "advantages.parquet", folder / "latents.safetensors", lora_dir, folder / "train",
              folder / "state", folder / "m_train.json", progress=False)
    import json

    return folder, json.loads((folder / "m_train.json").read_text())


def test_rollout_records_sde_steps(tiny_sd3_model, tmp_path):
    cfg = grpo_config(tiny_sd3_model)
    folder = tmp_path / "iter_000"
    generate.run(cfg, 0, None, folder / "samples.parquet", folder / "latents.safetensors", folder / "m.json",
                 progress=False, record_sde=True)
    samples = read_table(folder / "samples.parquet").to_pandas()
    tensors = read_tensors(folder / "latents.safetensors")
    sid = samples.sample_id[0]
    assert tensors[f"trajectory/{sid}/latents"].shape == (2, 16, 8, 8)
    assert tensors[f"trajectory/{sid}/log_probs"].dtype == torch.float32
    sigmas = tensors[f"trajectory/{sid}/sigmas"]
    assert (sigmas[1:] < sigmas[:-1]).all()  # a contiguous window, in order
    assert (tensors[f"trajectory/{sid}/std"] > 0).all()
    assert set(samples.sampler) == {"flow_sde"}


def test_grpo_iterations_align_train_and_learn(tiny_sd3_model, tmp_path):
    """Fresh LoRA: recomputed log-probs equal the stored ones; a trained LoRA, fused for sampling and
    unfused for training, drifts < 1e-4 under debug_alignment; real training moves the ratio."""
    cfg = grpo_config(tiny_sd3_model)
    folder, metrics = _iteration(cfg, tmp_path, 0)
    first = metrics["history"][0]
    assert first["train/log_prob_mean_abs_diff"] <= 1e-5  # before the first update: same weights
    assert metrics["history"][-1]["train/clipfrac"] > 0  # clipping engages after an update
    assert all(math.isfinite(h["train/kl_loss"]) for h in metrics["history"])

    debug = grpo_config(tiny_sd3_model, grpo={"debug_alignment": True})
    before = read_tensors(folder / "train/pytorch_lora_weights.safetensors")
    folder1, metrics1 = _iteration(debug, tmp_path, 1, lora_dir=str(folder / "train"))
    after = read_tensors(folder1 / "train/pytorch_lora_weights.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)  # no optimizer step
    drift = max(h["train/log_prob_mean_abs_diff"] for h in metrics1["history"])
    assert drift < 1e-4
    assert metrics1["history"][0]["train/kl_loss"] > 0  # the trained LoRA differs from the reference


def test_deterministic_runs_give_identical_loras(tiny_sd3_model, tmp_path):
    cfg = grpo_config(tiny_sd3_model, deterministic=True)
    loras = []
    for run in ("a", "b"):
        folder, _ = _iteration(cfg, tmp_path / run, 0)
        loras.append(read_tensors(folder / "train/pytorch_lora_weights.safetensors"))
    assert loras[0].keys() == loras[1].keys()
    assert all(torch.equal(loras[0][k], loras[1][k]) for k in loras[0])
    assert any(v.abs().sum() > 0 for k, v in loras[0].items() if "lora_B" in k or "lora.up" in k)


def test_grpo_on_sd15_via_ddim_with_eta(tiny_model, tmp_path):
    """DDPO-style GRPO on the tiny SD1.5 model: recorded DDIM (eta > 0) steps re-score exactly, and training moves the LoRA."""
    cfg = load(ROOT / "config.yaml", {
        "model": {"path": str(tiny_model), "build_tiny": False},
        "generate": {"prompts_per_iteration": 3, "images_per_prompt": 4, "steps": 4, "batch_size": 16,
                     "sde": {"noise_level": 1.0, "num_sde_steps": 2, "window_range": [0, 4]}},
        "train": {"loss": "grpo", "batch_size": 6, "learning_rate": 1e-3, "grpo": {"clip_range": 1e-3},
                  "checkpointing_steps": 100},
    })
    folder, metrics = _iteration(cfg, tmp_path, 0)
    assert metrics["history"][0]["train/log_prob_mean_abs_diff"] <= 1e-5
    assert metrics["history"][-1]["train/clipfrac"] > 0
    samples = read_table(folder / "samples.parquet").to_pandas()
    assert set(samples.sampler) == {"ddim_recorded"}
    lora = read_tensors(folder / "train/pytorch_lora_weights.safetensors")
    assert any(v.abs().sum() > 0 for k, v in lora.items() if "lora_B" in k or "lora.up" in k)


def test_resumed_grpo_training_matches_the_uninterrupted_run(tiny_sd3_model, tmp_path):
    """The in-stage state left behind (as by a killed job) is resumed, and the LoRA is the same."""
    cfg = grpo_config(tiny_sd3_model, checkpointing_steps=1, batch_size=3)
    folder, metrics = _iteration(cfg, tmp_path, 0)
    assert metrics["resumed_from_step"] == 0 and metrics["steps"] >= 3
    first = read_tensors(folder / "train/pytorch_lora_weights.safetensors")
    assert (folder / "state/state.safetensors").is_file()  # the last checkpoint before the end
    train.run(cfg, 0, folder / "advantages.parquet", folder / "latents.safetensors", None, folder / "train2",
              folder / "state", folder / "t2.json", progress=False)
    import json

    resumed = json.loads((folder / "t2.json").read_text())
    assert resumed["resumed_from_step"] == metrics["steps"] - 1
    second = read_tensors(folder / "train2/pytorch_lora_weights.safetensors")
    assert all(torch.allclose(first[k], second[k], atol=1e-7) for k in first)


@pytest.mark.parametrize("family, sde, message", [
    ("sd15", {"noise_level": 1.5}, r"^generate\.sde\.noise_level: on sd15 it is DDIM's eta of the recorded steps; "
                                   r"must be <= 1$"),
    ("sd3", {"num_sde_steps": 12}, r"^generate\.sde\.num_sde_steps: 12 does not fit"),
])
def test_grpo_startup_checks_name_the_key(family, sde, message):
    from rewardloop.objectives import get_objective
    from rewardloop.objectives.registry import ObjectiveError

    config = {"model": {"family": family}, "generate": {"steps": 10, "sde": {
        "noise_level": 0.7, "strategy": "sde_window", "num_sde_steps": 2, "window_range": [0, 10], **sde}}}
    with pytest.raises(ObjectiveError, match=message):
        get_objective("grpo").check(config)
    config["model"]["family"] = "sd3" if family == "sd15" else "sd15"
    if family == "sd15":  # a noise level above 1 is fine for the flow SDE
        get_objective("grpo").check(config)
    get_objective("grpo").check({**config, "model": {"family": family},
                                 "generate": {"steps": 10, "sde": {**config["generate"]["sde"], "noise_level": 1.0,
                                                                   "num_sde_steps": 2}}})


# --- the loss where the policy is, PPO's clip boundary, each step strategy at startup -----------------------

@pytest.mark.parametrize("guidance", [1.0, 2.0], ids=["plain", "cfg"])
@pytest.mark.parametrize("step", [FlowStep(), DDIMStep()], ids=["sd3-flow-sde", "sd15-ddim"])
def test_grpo_loss_is_computed_on_the_policy_device_in_fp32(meta_items, step, guidance):  # noqa: F811
    inputs = rollout_inputs(step, step.denoiser(), [1, -1, 1, -1], [1.0, -1.0, 0.5, -0.5], seed=10)
    inputs.tensors["rollout/guidance_scale"] = torch.tensor(guidance)
    objective = get_objective("grpo").from_config(step.config(kl_beta=0.5), 0)
    data = objective.load(inputs, step.model_info())
    assert data.advantages.dtype == torch.float32  # the table's float64 advantages, as the rest: fp32
    loss, logs = objective.loss(policy_on(META, step.denoiser(), step.denoiser()), data, (torch.tensor([2, 0]), 0))
    assert loss.device == META and loss.dtype == torch.float32 and loss.shape == ()
    assert set(logs) >= {"train/loss", "train/kl_loss", "train/clipfrac"}


def test_a_ratio_exactly_at_the_clip_boundary_is_not_clipped():
    """flow_grpo train_sd3.py: clipfrac = mean(|ratio - 1| > clip_range), strictly."""
    log_prob, old = torch.tensor([0.3, -0.2, 0.0]), torch.zeros(3)
    ratio = torch.exp(log_prob - old)
    clip = float((ratio[0] - 1).abs())
    _, clipfrac, _ = clipped_policy_loss(log_prob, old, torch.ones(3), clip)
    assert clipfrac.item() == 0.0
    _, clipfrac, _ = clipped_policy_loss(log_prob, old, torch.ones(3), clip * 0.999)
    assert clipfrac.item() == pytest.approx(1 / 3)


@pytest.mark.parametrize("strategy", [{"strategy": "sde_window", "num_sde_steps": 2, "window_range": [0, 10]},
                                      {"strategy": "epoch_global_random_choice", "num_sde_steps": 2,
                                       "candidate_steps": [1, 3, 5]}])
def test_grpo_startup_check_accepts_each_strategy(strategy):
    get_objective("grpo").check({"model": {"family": "sd3"},
                                 "generate": {"steps": 10, "sde": {"noise_level": 0.7, **strategy}}})
