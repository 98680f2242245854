"""Sampling never depends on the scheduler class a checkpoint ships (issue: real checkpoints run).

The published SD1.5 folder ships PNDM, SDXL base ships Euler: the same weights with those configs
must roll out exactly as with DDIM (eval, DPO rollouts with eta, GRPO's recorded steps), with
ddpo-pytorch's timestep handling (no repeated step, the last step's std never 0).
"""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest
import torch

from rewardloop.models import loading as models
from rewardloop.models.families import get_family
from rewardloop.sampling.ddim import SamplerSettings
from rewardloop.sampling.schedulers import SamplerError, build_sampler, check_sampler, inference_timesteps
from rewardloop.stages.common import SDEPlan, rollout

# stable-diffusion-v1-5's scheduler/scheduler_config.json (diffusers' docs, "Load schedulers").
SD15_PNDM = {"_class_name": "PNDMScheduler", "_diffusers_version": "0.6.0", "beta_end": 0.012,
             "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
             "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
             "trained_betas": None}
# stable-diffusion-xl-base-1.0's scheduler/scheduler_config.json.
SDXL_EULER = {"_class_name": "EulerDiscreteScheduler", "_diffusers_version": "0.19.0.dev0", "beta_end": 0.012,
              "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
              "interpolation_type": "linear", "num_train_timesteps": 1000, "prediction_type": "epsilon",
              "sample_max_value": 1.0, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
              "timestep_spacing": "leading", "trained_betas": None, "use_karras_sigmas": False}
PROMPTS = pd.DataFrame({"prompt_id": ["p0", "p1"],
                        "prompt": ["a red circle on a blue background", "a green square on a yellow background"]})


def shipped_with(model_dir, tmp_path, scheduler_config: dict):
    """A copy of ``model_dir`` whose scheduler folder holds ``scheduler_config`` (class included)."""
    copy = tmp_path / f"shipped-{scheduler_config['_class_name']}"
    shutil.copytree(model_dir, copy)
    (copy / "scheduler/scheduler_config.json").write_text(json.dumps(scheduler_config))
    index = json.loads((copy / "model_index.json").read_text())
    index["scheduler"] = ["diffusers", scheduler_config["_class_name"]]
    (copy / "model_index.json").write_text(json.dumps(index))
    return copy


def rollouts(model_dir, family: str, settings, sde=None):
    pipe = models.load_pipeline({"family": family, "path": str(model_dir)})
    seeds = [[11, 12], [13, 14]]
    torch.manual_seed(0)
    rows, latents, tensors = rollout(pipe, get_family(family), PROMPTS, seeds, settings, 4, "t", progress=False,
                                     sde=sde)
    return pipe, latents, tensors


@pytest.mark.parametrize("eta", [0.0, 1.0], ids=["eval", "dpo-rollout-eta1"])
def test_sd15_shipped_with_pndm_rolls_out_as_with_ddim(tiny_model, tmp_path, eta):
    settings = SamplerSettings(steps=10, guidance_scale=5.0, eta=eta, resolution=32)
    pipe, ddim, _ = rollouts(tiny_model, "sd15", settings)
    assert type(pipe.scheduler).__name__ == "DDIMScheduler"
    pndm_pipe, pndm, _ = rollouts(shipped_with(tiny_model, tmp_path, SD15_PNDM), "sd15", settings)
    assert type(pndm_pipe.scheduler).__name__ == "PNDMScheduler"
    assert torch.equal(ddim, pndm)
    # and it is not PNDM's own sampling, which would differ (and repeat a timestep)
    pndm_pipe.scheduler.set_timesteps(10)
    assert len(pndm_pipe.scheduler.timesteps) == 11


def test_sd15_recorded_rollouts_equal_whatever_is_shipped(tiny_model, tmp_path):
    """GRPO on SD1.5 (DDPO): 10 distinct recorded timesteps, equal records, finite log-probs."""
    settings = SamplerSettings(steps=10, guidance_scale=5.0, eta=0.0, resolution=32)
    sde = SDEPlan(1.0, [[0, 9], [4, 9], [8, 9], [9]], "flow_grpo")
    _, ddim, ddim_tensors = rollouts(tiny_model, "sd15", settings, sde)
    _, pndm, pndm_tensors = rollouts(shipped_with(tiny_model, tmp_path, SD15_PNDM), "sd15", settings, sde)
    assert torch.equal(ddim, pndm)
    assert ddim_tensors.keys() == pndm_tensors.keys()
    assert all(torch.equal(ddim_tensors[k], pndm_tensors[k]) for k in ddim_tensors)
    first = ddim_tensors["trajectory/t-p0-00/timesteps"].tolist()
    assert first == [901.0, 1.0]  # steps 0 and 9 of 901, 801, ..., 1


def test_final_alpha_one_still_gives_the_last_recorded_step_a_std(tiny_model, tmp_path):
    """A scheduler config with set_alpha_to_one: true would make the last DDIM step's std 0 (a log-prob of
    a point mass); recorded rollouts step to alphas_cumprod[0] instead, as SD1.5 ships and DDPO samples."""
    config = {**SD15_PNDM, "_class_name": "DDIMScheduler", "set_alpha_to_one": True}
    del config["skip_prk_steps"]
    settings = SamplerSettings(steps=4, guidance_scale=1.0, eta=0.0, resolution=32)
    _, _, tensors = rollouts(shipped_with(tiny_model, tmp_path, config), "sd15", settings,
                             SDEPlan(1.0, [[3], [3], [3], [3]], "flow_grpo"))
    std = tensors["trajectory/t-p0-00/std"]
    log_probs = torch.stack([tensors[f"trajectory/t-p{p}-0{g}/log_probs"] for p in (0, 1) for g in (0, 1)])
    assert float(std[0]) > 0.01 and torch.isfinite(log_probs).all()
    alphas = tensors["trajectory/t-p0-00/alphas_prev"]
    shipped = build_sampler(config, "ddim")
    assert float(alphas[0]) == pytest.approx(float(shipped.alphas_cumprod[0]))  # not the shipped final alpha 1
    assert float(shipped.final_alpha_cumprod) == 1.0


def test_sdxl_shipped_with_euler_rolls_out_as_with_ddim(tiny_sdxl_model, tmp_path):
    settings = SamplerSettings(steps=6, guidance_scale=5.0, eta=1.0, resolution=32)
    _, ddim, _ = rollouts(tiny_sdxl_model, "sdxl", settings)
    euler_pipe, euler, _ = rollouts(shipped_with(tiny_sdxl_model, tmp_path, SDXL_EULER), "sdxl", settings)
    assert type(euler_pipe.scheduler).__name__ == "EulerDiscreteScheduler"
    assert torch.equal(ddim, euler)


def test_another_sampler_is_a_choice_for_unrecorded_rollouts(tiny_model):
    ddim_settings = SamplerSettings(steps=8, guidance_scale=5.0, eta=0.0, resolution=32)
    _, ddim, _ = rollouts(tiny_model, "sd15", ddim_settings)
    for choice in ("dpm++", "euler", "pndm"):
        _, other, _ = rollouts(tiny_model, "sd15", SamplerSettings(8, 5.0, 0.0, 32, scheduler=choice))
        assert torch.isfinite(other).all() and not torch.equal(other, ddim), choice
        check_sampler(choice, flow=False, eta=0.0, records_steps=False)
        with pytest.raises(SamplerError, match=rf"^generate\.scheduler: {re.escape(choice)} has no per-step log-probability"):
            check_sampler(choice, flow=False, eta=0.0, records_steps=True)
        with pytest.raises(SamplerError, match=rf"^generate\.eta: 0\.5 is DDIM's; generate\.scheduler {re.escape(choice)} takes none"):
            check_sampler(choice, flow=False, eta=0.5, records_steps=False)
    with pytest.raises(SamplerError, match=r"^generate\.scheduler: 'ddim' is for the UNet families"):
        check_sampler("ddim", flow=True, eta=0.0, records_steps=True)


def test_ddim_from_a_shipped_config_keeps_its_schedule_not_its_class():
    ddim = build_sampler(SD15_PNDM, "ddim")
    assert inference_timesteps(ddim, 10) == [901, 801, 701, 601, 501, 401, 301, 201, 101, 1]
    assert not ddim.config.clip_sample and not ddim.config.set_alpha_to_one
    no_clip_key = {k: v for k, v in SD15_PNDM.items() if k != "clip_sample"}
    assert build_sampler(no_clip_key, "ddim").config.clip_sample is False  # DDIM's own default would be True
    trailing = build_sampler({**SD15_PNDM, "timestep_spacing": "trailing"}, "ddim")
    assert inference_timesteps(trailing, 4) == [999, 749, 499, 249]
    with pytest.raises(SamplerError, match=r"gives timesteps .* expected 1000 strictly decreasing values in \[0, 1000\)"):
        inference_timesteps(build_sampler(SD15_PNDM, "ddim"), 1000)  # leading + offset 1 reaches t = 1000


@torch.no_grad()
def test_flow_grid_follows_a_dynamically_shifted_config_as_the_sd3_pipeline_does(tiny_sd3_model, tmp_path):
    """A flow-match config with use_dynamic_shifting: the SD3 pipeline shifts its grid by the image's token
    count; without a mu, diffusers refuses to set the timesteps at all."""
    from rewardloop.sampling.flow import rollout_sigmas

    config = json.loads((tiny_sd3_model / "scheduler/scheduler_config.json").read_text())
    shifted = shipped_with(tiny_sd3_model, tmp_path, {**config, "use_dynamic_shifting": True, "base_shift": 0.5,
                                                      "max_shift": 1.15, "base_image_seq_len": 4,
                                                      "max_image_seq_len": 256})
    pipe = models.load_pipeline({"family": "sd3", "path": str(shifted)})
    settings = SamplerSettings(steps=4, guidance_scale=1.0, eta=0.0, resolution=32)
    ours = rollout_sigmas(pipe, get_family("sd3"), build_sampler(pipe.scheduler.config, "flow"), settings)
    pipe(prompt="a red circle", height=32, width=32, num_inference_steps=4, guidance_scale=1.0, output_type="latent")
    assert torch.allclose(ours, pipe.scheduler.sigmas.float())
    plain = rollout_sigmas(pipe, get_family("sd3"), build_sampler(config, "flow"), settings)
    assert not torch.allclose(ours, plain)  # the shift is not a no-op at this size


@pytest.mark.parametrize("family", ["sd15", "sdxl"])
def test_a_published_layout_replica_rolls_out_as_with_ddim_shipped(tmp_path, family):
    """The replicas ship the published PNDM (SD1.5) and Euler (SDXL) configs: the same weights shipped
    with DDIM on the same schedule give the same rollouts, eta 1 (DPO) and recorded (GRPO, SD1.5) alike."""
    from rewardloop.models.replicas import build_replica

    replica = tmp_path / "replica"
    build_replica(family, replica)
    shipped = json.loads((replica / "scheduler/scheduler_config.json").read_text())
    assert shipped["_class_name"] == {"sd15": "PNDMScheduler", "sdxl": "EulerDiscreteScheduler"}[family]
    ddim = {k: v for k, v in shipped.items() if k not in ("skip_prk_steps", "interpolation_type", "use_karras_sigmas")}
    ddim_copy = shipped_with(replica, tmp_path, {**ddim, "_class_name": "DDIMScheduler"})
    settings = SamplerSettings(steps=10, guidance_scale=5.0, eta=1.0, resolution=64)
    sde = SDEPlan(1.0, [[0, 9], [4], [8, 9], [9]], "flow_grpo") if family == "sd15" else None
    _, published, published_tensors = rollouts(replica, family, settings, sde)
    _, ours, ours_tensors = rollouts(ddim_copy, family, settings, sde)
    assert torch.equal(published, ours)
    assert all(torch.equal(published_tensors[k], ours_tensors[k]) for k in published_tensors)
