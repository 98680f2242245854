"""Preflight checks of an objective's setup, before iteration 0 trains: tensors and the objective's own
loss in, figures out (the preflight stage loads the models and data; see docs/flow-rl.md); then
:func:`judge` holds the figures against the ``preflight`` tolerances.

Each measurement returns ``{"applies": True, "figures": {...}}``; one that does not apply to an
objective returns ``{"applies": False, "reason": ...}`` instead of pretending to pass. :func:`judge`
adds ``passed``, ``thresholds`` and ``causes`` to each that applies.

- ``importance_ratio`` (GRPO): a few recorded rollout steps re-scored by the objective's loss with
  the LoRA untouched (as ``train.grpo.debug_alignment``); the ratio exp(logp - logp_old) must be 1.
- ``noise_level_0`` (GRPO on sd3): the rollouts' SDE step at noise level 0 is the Euler (ODE) step, so
  the final latents of both samplers, same seeds, must agree.
- ``rollout_guidance`` (NFT, AWM): they train the unguided velocity on the rollouts' clean latents, so
  the rollouts must be sampled without CFG too.
- ``start_loss`` (DPO): at the start the policy is its reference, so the loss of the first pairs is log 2.
"""

from __future__ import annotations

import math

CHECKS = ("importance_ratio", "noise_level_0", "rollout_guidance", "start_loss")

CAUSES = {
    "importance_ratio": "different CFG in rollout and training (the recorded rollout/guidance_scale is the one "
                        "training applies); batch-dependent kernels (rollouts batched at generate.batch_size, the "
                        "re-scoring at another size; TF32 or fused attention kernels); precision (generate.precision "
                        "or train.mixed_precision other than fp32); rollouts sampled from another adapter than the "
                        "one training starts from",
    "noise_level_0": "batch-dependent kernels (the SDE pass runs batched, the ODE pass one sample at a time); "
                     "precision (generate.precision other than fp32); a step type (generate.sde.type) whose "
                     "noise-0 step is not the Euler step",
    "rollout_guidance": "rollouts sampled with CFG (generate.guidance_scale != 1) while the objective trains the "
                        "unguided velocity: set generate.guidance_scale: 1.0 (its published recipes)",
    "start_loss": "a reference that is not the policy at the start (train.dpo.reference: base with a "
                  "model.init_lora, or a reference model in another precision); precision "
                  "(train.mixed_precision); different conditioning of policy and reference",
}

NOT_APPLICABLE = {
    "importance_ratio": "needs rollouts that record their steps' log-probs (train.loss grpo)",
    "noise_level_0": "needs SDE rollouts of a flow model (train.loss grpo, model.family sd3)",
    "rollout_guidance": "only the CFG-free objectives on clean latents (train.loss nft, awm)",
    "start_loss": "only a pair objective that starts at its reference (train.loss dpo)",
}


# The figures each check holds against a threshold: the preflight key of its tolerance, or a constant.
LIMITS = {
    "importance_ratio": {"log_prob_mean_abs_diff": "log_prob_tolerance", "ratio_max_deviation": "ratio_tolerance"},
    "noise_level_0": {"latent_max_abs_diff": "ode_tolerance"},
    "rollout_guidance": {"guidance_deviation": 1e-6},
    "start_loss": {"abs_diff": "loss_tolerance"},
}


def not_applicable(reason: str) -> dict:
    return {"applies": False, "reason": reason}


def measured(figures: dict) -> dict:
    return {"applies": True, "figures": figures}


def importance_ratio(objective, policy, data, rollouts: int) -> dict:
    """The first ``rollouts`` samples' recorded steps re-scored by ``objective.loss`` (no optimizer step)."""
    import torch

    index = torch.arange(min(rollouts, len(data)))
    diffs, ratios = [], []
    with torch.no_grad():
        for k in range(data.recorded_steps):
            _, logs = objective.loss(policy, data, (index, k))
            diffs.append(logs["train/log_prob_mean_abs_diff"])
            ratios.append(logs["train/ratio_mean"])
    return measured({"rollouts": len(index), "recorded_steps": data.recorded_steps,
                     "log_prob_mean_abs_diff": sum(diffs) / len(diffs), "log_prob_mean_abs_diff_max_step": max(diffs),
                     "ratio_mean": sum(ratios) / len(ratios), "ratio_max_deviation": max(abs(r - 1) for r in ratios)})


def final_latents_agree(sde_latents, ode_latents) -> dict:
    """Final latents of the SDE sampler at noise level 0 against the ODE sampler's, same seeds."""
    diff = (sde_latents.float() - ode_latents.float()).abs()
    return measured({"rollouts": len(sde_latents), "latent_max_abs_diff": float(diff.max()),
                     "latent_mean_abs_diff": float(diff.mean()),
                     "latent_scale": float(ode_latents.float().abs().mean())})


def rollout_guidance(guidance_scales, trained_scale: float = 1.0) -> dict:
    """The rollouts' CFG scales (samples.parquet) against the one the objective trains at."""
    scales = sorted({float(s) for s in guidance_scales})
    return measured({"rollout_guidance_scales": scales, "trained_guidance_scale": trained_scale,
                     "guidance_deviation": max(abs(s - trained_scale) for s in scales)})


def start_loss(objective, policy, data, micros) -> dict:
    """The objective's loss on its first update's micro-batches (no optimizer step) against log 2."""
    import torch

    with torch.no_grad():
        losses = [objective.loss(policy, data, micro)[1]["train/loss"] for micro in micros]
    loss = sum(losses) / len(losses)
    return measured({"micro_batches": len(losses), "pairs": len(losses) * objective.train.batch_size,
                     "start_loss": loss, "log_2": math.log(2), "abs_diff": abs(loss - math.log(2))})


def judge(measurements: dict, tolerances: dict) -> dict:
    """The report: each applicable check with its thresholds, passed and usual causes; passed overall."""
    report = {key: value for key, value in measurements.items() if key != "checks"}
    report["checks"] = {}
    for name, check in measurements["checks"].items():
        if check["applies"]:
            thresholds = {figure: tolerances[limit] if isinstance(limit, str) else limit
                          for figure, limit in LIMITS[name].items()}
            passed = all(check["figures"][figure] <= limit for figure, limit in thresholds.items())
            check = {**check, "thresholds": thresholds, "passed": passed, "causes": CAUSES[name]}
        report["checks"][name] = check
    report["passed"] = all(c["passed"] for c in report["checks"].values() if c["applies"])
    return report


def failure_message(report: dict) -> str:
    """What failed, with its figures, thresholds and usual causes (one paragraph per failed check)."""
    lines = []
    for name, check in report["checks"].items():
        if check.get("applies") and not check["passed"]:
            figures = ", ".join(f"{k} = {_fmt(v)}" for k, v in check["figures"].items())
            thresholds = ", ".join(f"{k} <= {_fmt(v)}" for k, v in check["thresholds"].items())
            lines.append(f"{name} failed: {figures} (threshold: {thresholds}). Usual causes: {check['causes']}.")
    return " ".join(lines)


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
