"""The training signal keeps its direction through the files the stages write, on the tiny models.

Each test runs the stages as the workflow does (generate -> score -> pairs | advantages -> train, the
real ``run`` entry points, every hand-off a Parquet or safetensors file) and then measures the trained
LoRA that train wrote against the base model. The direction is taken from ``scores.parquet`` alone (a
pair's chosen image is the one that scored higher; a sample's advantage is positive when it scored above
its prompt's mean), never from the pairs or advantages columns, so that an inversion anywhere between
the signal stage and the objective (a writer, the Parquet reader, the objective's ``load``) shows as
training the wrong way. The measures are written here from the papers' formulas (objective_checks.py).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from objective_checks import denoising_errors, flow_sde_mean, flow_velocity, gaussian_log_likelihood
from rewardloop.artifacts import read_table, read_tensors
from rewardloop.config import load
from rewardloop.models import loading
from rewardloop.stages import advantages, generate, pairs, score, train
from workflow_helpers import ROOT

PROMPTS = {"train": str(ROOT / "resources/prompts/train.txt"), "eval": str(ROOT / "resources/prompts/eval.txt")}


def stage_config(recipe: str, model_dir, generate_cfg: dict, train_cfg: dict, **other) -> dict:
    """``recipe`` on the session's tiny model, with small generate and train settings."""
    return load(ROOT / recipe, {"model": {"path": str(model_dir), "build_tiny": False}, "prompts": PROMPTS,
                                "generate": generate_cfg, "train": {"checkpointing_steps": 1000, **train_cfg},
                                **other})


def rollout_files(cfg, folder, record_sde=False):
    """generate and score of iteration 0, as rules generate and score run them: the folder they wrote."""
    generate.run(cfg, 0, None, folder / "samples.parquet", folder / "latents.safetensors", folder / "generate.json",
                 progress=False, record_sde=record_sde)
    score.run(cfg, folder / "samples.parquet", folder / "scores.parquet", folder / "score.json", progress=False)
    return folder


def train_stage(cfg, folder, signal: str):
    """Rule train on ``folder``'s signal file (pairs.parquet or advantages.parquet): the LoRA folder it wrote."""
    out = folder / f"train-{cfg['train']['loss']}"
    train.run(cfg, 0, folder / signal, folder / "latents.safetensors", None, out, folder / f"state-{out.name}",
              folder / f"{out.name}.json", progress=False)
    assert json.loads((folder / f"{out.name}.json").read_text())["history"]
    return out


def rewards(folder) -> pd.Series:
    """scores.parquet's combined reward by sample_id."""
    frame = read_table(folder / "scores.parquet").to_pandas()
    return frame.set_index("sample_id").reward


def pairs_ordered_by_reward(folder) -> pd.DataFrame:
    """The pairs of pairs.parquet as (prompt_id, better, worse), ordered by scores.parquet's rewards,
    whatever the file's columns call them."""
    reward = rewards(folder)
    rows = []
    for row in read_table(folder / "pairs.parquet").to_pandas().itertuples():
        a, b = row.chosen, row.rejected
        better, worse = (a, b) if reward[a] > reward[b] else (b, a)
        rows.append({"prompt_id": row.prompt_id, "better": better, "worse": worse})
    assert rows, "pairs.parquet has no pairs"
    return pd.DataFrame(rows)


def advantage_signs(folder) -> pd.Series:
    """+1 / -1 per sample: scored above / below its prompt's mean reward (ties left out)."""
    frame = read_table(folder / "scores.parquet").to_pandas()
    centred = frame.reward - frame.groupby("prompt_id").reward.transform("mean")
    signs = pd.Series(torch.sign(torch.tensor(centred.to_numpy())).numpy(), index=frame.sample_id)
    return signs[signs != 0]


def stack(tensors, prefix, keys):
    return torch.stack([tensors[f"{prefix}/{k}"] for k in keys])


def denoisers(cfg, lora_dir):
    """(base, trained) denoisers of cfg's model, loaded the way generate loads model(it)."""
    family = loading.load_pipeline(cfg["model"], text_encoders=False)
    denoiser = "unet" if cfg["model"]["family"] == "sd15" else "transformer"
    base = getattr(family, denoiser)
    trained = getattr(loading.load_pipeline(cfg["model"], lora_dir=str(lora_dir), text_encoders=False), denoiser)
    return base.eval(), trained.eval()


# --- pairs -> DPO: the trained model denoises the chosen images better, relative to the base ---------

@pytest.fixture(scope="module")
def sd15_pair_files(tiny_model, tmp_path_factory):
    cfg = sd15_dpo_config(tiny_model)
    folder = rollout_files(cfg, tmp_path_factory.mktemp("sd15-pairs"))
    pairs.run(cfg, folder / "scores.parquet", folder / "pairs.parquet", folder / "pairs.json")
    return folder


def sd15_dpo_config(model_dir):
    return stage_config("config.yaml", model_dir,
                        {"prompts_per_iteration": 8, "images_per_prompt": 4, "steps": 5, "batch_size": 32},
                        {"loss": "dpo", "dpo": {"beta": 2000, "reference": "base"}, "steps": 24, "batch_size": 8,
                         "learning_rate": 1e-3})


def test_pairs_file_names_the_higher_scored_image_chosen(sd15_pair_files):
    table = read_table(sd15_pair_files / "pairs.parquet").to_pandas()
    reward = rewards(sd15_pair_files)
    scores = read_table(sd15_pair_files / "scores.parquet").to_pandas()
    spread = scores.groupby("prompt_id").reward.agg(lambda r: r.max() > r.min())
    assert sorted(table.prompt_id) == sorted(spread.index[spread])  # best vs worst: one pair per untied prompt
    assert (reward[table.chosen].to_numpy() > reward[table.rejected].to_numpy()).all()
    torch.testing.assert_close(torch.tensor(table.margin.to_numpy()),
                               torch.tensor(reward[table.chosen].to_numpy() - reward[table.rejected].to_numpy()))


def sd15_dpo_margin(base, trained, folder) -> float:
    """Diffusion-DPO's implicit preference, measured: how much more the trained model's denoising error fell
    (from the base's) on the better images than on the worse ones (< 0: towards the better images)."""
    ordered = pairs_ordered_by_reward(folder)
    tensors = read_tensors(folder / "latents.safetensors")
    embeds = stack(tensors, "prompt_embeds", ordered.prompt_id)
    gains = []
    for column in ("better", "worse"):
        latents = stack(tensors, "latents", ordered[column])
        gains.append(denoising_errors(trained, latents, embeds) - denoising_errors(base, latents, embeds))
    return float((gains[0] - gains[1]).mean())


def test_dpo_through_pairs_file_moves_sd15_towards_the_chosen_images(tiny_model, sd15_pair_files):
    cfg = sd15_dpo_config(tiny_model)
    lora_dir = train_stage(cfg, sd15_pair_files, "pairs.parquet")
    margin = sd15_dpo_margin(*denoisers(cfg, lora_dir), sd15_pair_files)
    assert margin < 0, margin


# --- advantages -> GRPO: the trained policy raises the log-prob of the positive-advantage transitions ----

def sd3_grpo_config(model_dir):
    # guidance 1: the measure below recomputes the rollouts' unguided velocity; kl_beta 0 and a wider clip
    # range let a few updates move the policy visibly.
    return stage_config("configs/tiny_sd3_grpo.yaml", model_dir,
                        {"prompts_per_iteration": 3, "images_per_prompt": 4, "steps": 4, "batch_size": 16,
                         "guidance_scale": 1.0, "sde": {"num_sde_steps": 2, "window_range": [0, 4]}},
                        {"loss": "grpo", "batch_size": 6, "gradient_accumulation_steps": 1, "learning_rate": 3e-3,
                         "grpo": {"inner_epochs": 4, "clip_range": 0.05, "kl_beta": 0.0}},
                        advantages={"globalize_reward_std": False})


@pytest.fixture(scope="module")
def sd3_advantage_files(tiny_sd3_model, tmp_path_factory):
    cfg = sd3_grpo_config(tiny_sd3_model)
    folder = rollout_files(cfg, tmp_path_factory.mktemp("sd3-advantages"), record_sde=True)
    advantages.run(cfg, folder / "scores.parquet", folder / "advantages.parquet", folder / "advantages.json")
    return folder


def test_advantages_file_signs_follow_the_rewards(sd3_advantage_files):
    table = read_table(sd3_advantage_files / "advantages.parquet").to_pandas().set_index("sample_id")
    signs = advantage_signs(sd3_advantage_files)
    assert len(table) == 12 and set(signs.index) == set(table.index)
    assert (torch.sign(torch.tensor(table.advantage[signs.index].to_numpy())).numpy() == signs.to_numpy()).all()


@torch.no_grad()
def transition_log_probs(model, tensors, sample_ids, prompt_ids) -> torch.Tensor:
    """Per sample, the mean log N(next; Flow-GRPO SDE mean under ``model``, (std sqrt(sigma - sigma_next))^2) of
    its recorded steps (latents.safetensors' trajectory/<id>/*), recomputed from the formulas."""
    assert float(tensors["rollout/guidance_scale"]) == 1.0
    out = []
    for sid, pid in zip(sample_ids, prompt_ids):
        t = {k: tensors[f"trajectory/{sid}/{k}"] for k in ("latents", "next_latents", "sigmas", "sigmas_next", "std")}
        steps = len(t["latents"])
        embeds = tensors[f"prompt_embeds/{pid}"].expand(steps, -1, -1)
        pooled = tensors[f"pooled_embeds/{pid}"].expand(steps, -1)
        logps = []
        for k in range(steps):
            sigma, sigma_next, std = (float(t[key][k]) for key in ("sigmas", "sigmas_next", "std"))
            v = flow_velocity(model, t["latents"][k:k + 1], sigma, embeds[k:k + 1], pooled[k:k + 1])
            mean = flow_sde_mean(v, t["latents"][k:k + 1], sigma, sigma_next, std)
            logps.append(gaussian_log_likelihood(t["next_latents"][k:k + 1], mean, std * (sigma - sigma_next) ** 0.5))
        out.append(torch.cat(logps).mean())
    return torch.stack(out)


def grpo_lean(base, trained, folder) -> float:
    """How much more the trained policy raised (from the base) the log-prob of the positive-advantage samples'
    transitions than of the negative ones' (> 0: towards the positive ones)."""
    signs = advantage_signs(folder)
    prompts = read_table(folder / "scores.parquet").to_pandas().set_index("sample_id").prompt_id[signs.index]
    tensors = read_tensors(folder / "latents.safetensors")
    gains = (transition_log_probs(trained, tensors, signs.index, prompts)
             - transition_log_probs(base, tensors, signs.index, prompts))
    positive = torch.tensor(signs.to_numpy() > 0)
    return float(gains[positive].mean() - gains[~positive].mean())


def test_grpo_through_advantages_file_raises_the_positive_advantage_transitions(tiny_sd3_model, sd3_advantage_files):
    cfg = sd3_grpo_config(tiny_sd3_model)
    lora_dir = train_stage(cfg, sd3_advantage_files, "advantages.parquet")
    lean = grpo_lean(*denoisers(cfg, lora_dir), sd3_advantage_files)
    assert lean > 0, lean
