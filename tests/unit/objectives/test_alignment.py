"""rewardloop.objectives.alignment: the preflight's measurements on the real objectives (GRPO's importance
ratio, DPO's start loss) through a fresh and a trained policy, the pure ones on known inputs, and the
judging and wording of a report against its tolerances. Seconds each, on the tiny random-init denoisers
of objective_checks.py. (tests/unit/stages/test_preflight_stage.py runs the stage that calls them.)
"""

from __future__ import annotations

import math

import pytest
import torch

from objective_checks import config, pair_inputs, prompt_embeds, sd15_model_info, style_latents, tiny_unet, trained
from objective_inputs import BAD, GOOD, SD15_LATENT, FlowStep, rollout_inputs
from rewardloop.objectives import alignment
from rewardloop.objectives.registry import TrainingInputs, get_objective
from rewardloop.training.trainer import Trainer


def fresh(cfg: dict, denoiser, inputs, model_info):
    """What the preflight stage holds before iteration 0 trains: (objective, policy, data), no update."""
    objective = get_objective(cfg["train"]["loss"]).from_config({**cfg, "seed": 0}, 0)
    trainer = Trainer(objective.train, denoiser, 0, 0)
    return objective, trainer.policy, objective.load(inputs, model_info)


# --- importance_ratio (GRPO) -----------------------------------------------------------------------

class LaterStep(FlowStep):
    """A second recorded step of the same schedule, after FlowStep's."""

    sigma, sigma_next = 0.75, 0.6
    std = FlowStep.noise_level * math.sqrt(sigma / (1 - sigma))
    scale = std * math.sqrt(sigma - sigma_next)


def two_step_rollouts() -> TrainingInputs:
    """8 rollouts, each with two recorded steps (FlowStep's then LaterStep's), recorded under the base model."""
    leans, advantages = [1, -1] * 4, [1.5, -0.5, 0.2, -1.0, 2.0, -2.0, 0.7, -0.9]
    first, second = (rollout_inputs(step, FlowStep().denoiser(), leans, advantages, seed=10)
                     for step in (FlowStep(), LaterStep()))
    tensors = dict(first.tensors)
    for key, value in second.tensors.items():
        if key.startswith("trajectory/"):
            tensors[key] = torch.cat([first.tensors[key], value])
    return TrainingInputs(first.signal, tensors, first.signal_path, first.latents_path)


def test_importance_ratio_is_one_on_the_rollouts_policy_and_leaves_one_after_an_update(tmp_path):
    step, inputs = FlowStep(), two_step_rollouts()
    cfg = step.config()
    objective, policy, data = fresh(cfg, step.denoiser(), inputs, step.model_info())
    assert data.recorded_steps == 2
    figures = alignment.importance_ratio(objective, policy, data, rollouts=3)["figures"]
    assert figures["rollouts"] == 3 and figures["recorded_steps"] == 2
    assert figures["log_prob_mean_abs_diff"] < 1e-4 and figures["ratio_max_deviation"] < 1e-4
    assert figures["ratio_mean"] == pytest.approx(1, abs=1e-4)
    # more rollouts asked for than recorded: all of them
    assert alignment.importance_ratio(objective, policy, data, rollouts=100)["figures"]["rollouts"] == len(data) == 8

    objective, trainer, data, _ = trained(cfg, step.denoiser(), inputs, step.model_info(), tmp_path)
    moved = alignment.importance_ratio(objective, trainer.policy, data, rollouts=4)
    assert moved["applies"] is True
    moved = moved["figures"]
    assert moved["ratio_max_deviation"] > 100 * max(figures["ratio_max_deviation"], 1e-6)
    # the figures are the per-step logs of the objective's own loss, averaged over the recorded steps and
    # their worst step (each step re-scored on the same 4 rollouts, no optimizer step)
    with torch.no_grad():
        logs = [objective.loss(trainer.policy, data, (torch.arange(4), k))[1] for k in range(2)]
    diffs, ratios = [log["train/log_prob_mean_abs_diff"] for log in logs], [log["train/ratio_mean"] for log in logs]
    assert diffs[0] != pytest.approx(diffs[1])  # two distinguishable steps
    assert moved["log_prob_mean_abs_diff"] == pytest.approx((diffs[0] + diffs[1]) / 2)
    assert moved["log_prob_mean_abs_diff_max_step"] == pytest.approx(max(diffs))
    assert moved["ratio_mean"] == pytest.approx((ratios[0] + ratios[1]) / 2)
    assert moved["ratio_max_deviation"] == pytest.approx(max(abs(r - 1) for r in ratios))


# --- start_loss (DPO) -------------------------------------------------------------------------------

def test_dpo_starts_at_log_2_on_its_reference_and_leaves_it_after_an_update(tmp_path):
    inputs = pair_inputs(style_latents(GOOD, 12, SD15_LATENT, seed=1), style_latents(BAD, 12, SD15_LATENT, seed=2),
                         prompt_embeds(12, 64, seed=3))
    cfg = config("config.yaml", loss="dpo", steps=6, batch_size=4, gradient_accumulation_steps=2,
                 learning_rate=5e-3, dpo={"beta": 2000, "reference": "base"})
    objective, policy, data = fresh(cfg, tiny_unet(), inputs, sd15_model_info())
    first_update = objective.plan(data, 1)[0]
    assert len(first_update) == 2
    start = alignment.start_loss(objective, policy, data, first_update)
    assert start["applies"] is True
    figures = start["figures"]
    assert figures["micro_batches"] == 2 and figures["pairs"] == 8
    assert figures["log_2"] == math.log(2)
    assert figures["start_loss"] == pytest.approx(math.log(2), abs=1e-6) and figures["abs_diff"] < 1e-6

    objective, trainer, data, _ = trained(cfg, tiny_unet(), inputs, sd15_model_info(), tmp_path)
    after = alignment.start_loss(objective, trainer.policy, data, first_update)["figures"]
    assert after["abs_diff"] == pytest.approx(abs(after["start_loss"] - math.log(2))) and after["abs_diff"] > 1e-3


# --- the pure measurements ----------------------------------------------------------------------------

def test_final_latents_agree_measures_the_largest_and_mean_difference_in_float32():
    ode = torch.full((3, 4, 2, 2), -2.0, dtype=torch.float16)
    sde = ode.clone()
    sde[1, 2, 0, 1] += 0.5
    sde[2, 0, 1, 1] -= 0.25
    check = alignment.final_latents_agree(sde, ode)
    assert check == {"applies": True, "figures": {"rollouts": 3, "latent_max_abs_diff": 0.5,
                                                  "latent_mean_abs_diff": pytest.approx(0.75 / 48),
                                                  "latent_scale": 2.0}}


def test_rollout_guidance_is_the_largest_distance_from_the_trained_scale():
    figures = alignment.rollout_guidance([4.5, 1.0, 2.0, 4.5])["figures"]
    assert figures == {"rollout_guidance_scales": [1.0, 2.0, 4.5], "trained_guidance_scale": 1.0,
                       "guidance_deviation": 3.5}
    tensor_scales = alignment.rollout_guidance(torch.tensor([4.5, 1.0]), trained_scale=2.0)
    assert tensor_scales["figures"]["guidance_deviation"] == 2.5
    assert alignment.rollout_guidance([1, 1])["figures"]["guidance_deviation"] == 0


# --- judge and failure_message ------------------------------------------------------------------------

TOLERANCES = {"log_prob_tolerance": 1e-5, "ratio_tolerance": 1e-3, "ode_tolerance": 0.01, "loss_tolerance": 0.05}


def measurements(ratio_deviation: float, rollout_scales=(4.5, 1.0)) -> dict:
    return {"objective": "grpo", "iteration": 0, "checks": {
        "importance_ratio": alignment.measured({"rollouts": 4, "log_prob_mean_abs_diff": 1e-6,
                                                "ratio_max_deviation": ratio_deviation}),
        "noise_level_0": alignment.measured({"latent_max_abs_diff": 0.01}),  # at its threshold: passes
        "rollout_guidance": alignment.rollout_guidance(rollout_scales),
        "start_loss": alignment.not_applicable("only DPO"),
    }}


def test_judge_holds_each_applicable_check_to_its_tolerances_and_constants():
    given = measurements(ratio_deviation=2e-3)
    report = alignment.judge(given, TOLERANCES)
    assert given == measurements(ratio_deviation=2e-3)  # the measurements are not changed
    assert report["objective"] == "grpo" and report["iteration"] == 0 and report["passed"] is False
    checks = report["checks"]
    assert checks["importance_ratio"]["thresholds"] == {"log_prob_mean_abs_diff": 1e-5, "ratio_max_deviation": 1e-3}
    assert checks["importance_ratio"]["passed"] is False
    assert checks["importance_ratio"]["causes"] == alignment.CAUSES["importance_ratio"]
    assert checks["importance_ratio"]["figures"] == given["checks"]["importance_ratio"]["figures"]
    assert checks["noise_level_0"]["passed"] is True and checks["noise_level_0"]["thresholds"] == {
        "latent_max_abs_diff": 0.01}
    assert checks["rollout_guidance"] == {**given["checks"]["rollout_guidance"], "passed": False,
                                          "thresholds": {"guidance_deviation": 1e-6},
                                          "causes": alignment.CAUSES["rollout_guidance"]}
    assert checks["start_loss"] == {"applies": False, "reason": "only DPO"}  # not judged, not counted

    assert alignment.judge(measurements(ratio_deviation=1e-3, rollout_scales=[1.0]), TOLERANCES)["passed"] is True
    none_apply = {"checks": {name: alignment.not_applicable("n/a") for name in alignment.CHECKS}}
    assert alignment.judge(none_apply, TOLERANCES) == {**none_apply, "passed": True}


def test_failure_message_names_each_failed_check_with_its_figures_thresholds_and_causes():
    report = alignment.judge(measurements(ratio_deviation=0.00123456), TOLERANCES)
    assert alignment.failure_message(report) == (
        "importance_ratio failed: rollouts = 4, log_prob_mean_abs_diff = 1e-06, ratio_max_deviation = 0.001235 "
        "(threshold: log_prob_mean_abs_diff <= 1e-05, ratio_max_deviation <= 0.001). "
        f"Usual causes: {alignment.CAUSES['importance_ratio']}. "
        "rollout_guidance failed: rollout_guidance_scales = [1.0, 4.5], trained_guidance_scale = 1, "
        "guidance_deviation = 3.5 (threshold: guidance_deviation <= 1e-06). "
        f"Usual causes: {alignment.CAUSES['rollout_guidance']}.")
    passing = alignment.judge(measurements(ratio_deviation=0.0, rollout_scales=[1.0]), TOLERANCES)
    assert alignment.failure_message(passing) == ""


def test_every_check_has_its_limits_causes_and_reason_to_not_apply():
    assert set(alignment.LIMITS) == set(alignment.CAUSES) == set(alignment.NOT_APPLICABLE) == set(alignment.CHECKS)
    assert alignment.not_applicable("why") == {"applies": False, "reason": "why"}
