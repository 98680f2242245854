"""preflight: before iteration 0 trains, check that rollouts and training agree (objectives/alignment.py).

:func:`run` (rule preflight) reads iteration 0's rollouts (samples.parquet, latents.safetensors) and
signal, loads what train loads (train.prepare, the LoRA untouched) and, for the noise-level-0 check,
what generate loads, and measures the checks the objective declares (``preflight_checks``); every
other check is written as not applicable, with why. :func:`judge` (rule preflight_gate) holds the
figures against the ``preflight`` tolerances: it writes preflight.json (figures, thresholds,
pass/fail) when all pass, and otherwise raises PreflightError with the figures, the thresholds and
the usual causes and writes nothing, so that Snakemake keeps rule train (which takes preflight.json
as input) from running. Two jobs, so that a changed tolerance redoes only the judgement.
"""

from __future__ import annotations

import json
from pathlib import Path

from rewardloop.artifacts import read_table, write_json
from rewardloop.models import loading as models
from rewardloop.models.families import get_family
from rewardloop.objectives import alignment, get_objective
from rewardloop.stages.common import timed, torch_setup


class PreflightError(RuntimeError):
    """A preflight check failed; the message states its figures, thresholds and usual causes."""


def _first_rollouts(samples_path, count: int):
    columns = ["prompt_id", "prompt", "seed", "guidance_scale"]
    return read_table(samples_path, columns=columns).slice(0, count).to_pandas()


def _noise_level_0(cfg, samples_path, rollout_lora_dir, device) -> dict:
    """The rollouts' SDE sampler at noise level 0, every step an SDE step, batched as generate batches,
    against the ODE sampler one sample at a time: the same first rollouts' prompts and seeds."""
    from rewardloop.sampling.schedulers import build_sampler, sampler_name
    from rewardloop.stages.common import _sample
    from rewardloop.stages.generate import sampler_settings

    gen = cfg["generate"]
    family = get_family(cfg["model"]["family"])
    pipe = models.load_pipeline(cfg["model"], lora_dir=rollout_lora_dir, device=device,
                                dtype=models.torch_dtype(gen["precision"]))
    rows = _first_rollouts(samples_path, cfg["preflight"]["rollouts"])
    cond = {k: v.float().cpu() for k, v in family.encode(pipe, rows.prompt.tolist()).items()}
    seeds = [int(s) for s in rows.seed]
    settings = sampler_settings(gen)

    def sample(recorded: bool, batch_size: int):
        scheduler = build_sampler(pipe.scheduler.config, sampler_name(settings.scheduler, family.flow_matching), recorded)
        steps = [list(range(settings.steps))] * len(seeds) if recorded else None
        return _sample(pipe, family, cond, seeds, settings, batch_size, 0.0, steps, False, "preflight", scheduler,
                       gen["sde"]["type"])[0]

    return alignment.final_latents_agree(sample(True, gen["batch_size"]), sample(False, 1))


def _training_checks(cfg, names, signal_path, latents_path, init_lora_dir, threads) -> dict:
    """The checks that need the train stage's models and data (loaded once)."""
    from rewardloop.stages import train

    pre = cfg["preflight"]
    if not {"importance_ratio", "start_loss"} & set(names):
        return {}
    job = train.prepare(cfg, 0, signal_path, latents_path, init_lora_dir, threads)
    policy, objective, data = job.trainer.policy, job.objective, job.data
    results = {}
    if "importance_ratio" in names:
        results["importance_ratio"] = alignment.importance_ratio(objective, policy, data, pre["rollouts"])
    if "start_loss" in names:
        first_update = objective.plan(data, policy.num_processes)[0]
        results["start_loss"] = alignment.start_loss(objective, policy, data, first_update)
    return results


def run(cfg, samples_path, signal_path, latents_path, init_lora_dir, rollout_lora_dir, out_path, threads=1) -> dict:
    """cfg: train's sections (seed, model, train, data, device, advantages), generate and preflight.rollouts.
    Writes the measurements (preflight_figures.json)."""
    objective = get_objective(cfg["train"]["loss"])
    names = objective.preflight_checks
    family = get_family(cfg["model"]["family"])
    pre = cfg["preflight"]
    report = {"objective": objective.name, "iteration": 0, "checks": {}}
    checks = report["checks"]
    device = torch_setup(threads, cfg["device"])
    with timed(report, "perf/preflight_time"):
        checks.update(_training_checks(cfg, names, signal_path, latents_path, init_lora_dir, threads))
        if "noise_level_0" in names and family.flow_matching:
            checks["noise_level_0"] = _noise_level_0(cfg, samples_path, rollout_lora_dir, device)
        elif "noise_level_0" in names:
            checks["noise_level_0"] = alignment.not_applicable(
                f"model.family {family.name}: the recorded DDIM sampler ends at alphas_cumprod[0], the ODE one at "
                "alpha 1, and DDIM at eta 0 has no log-prob; there is no noise-0 SDE step to compare")
        if "rollout_guidance" in names:
            # The scale the objective trains at: 1 where guidance is a CFG pass it leaves out; the rollout's own
            # where it is an embedding of the one pass (FLUX.1-dev), which a mismatch would still show.
            scales = _first_rollouts(samples_path, pre["rollouts"]).guidance_scale
            checks["rollout_guidance"] = alignment.rollout_guidance(
                scales, family.cfg_free_scale(float(scales.iloc[0])))
    for name in alignment.CHECKS:
        checks.setdefault(name, alignment.not_applicable(
            f"train.loss {objective.name}: {alignment.NOT_APPLICABLE[name]}"))
    write_json(report, out_path)
    return report


def judge(figures_path, tolerances, out_path) -> dict:
    """The measurements of :func:`run` against ``tolerances`` (the preflight section): preflight.json, or
    PreflightError naming what failed."""
    report = alignment.judge(json.loads(Path(figures_path).read_text()), tolerances)
    print(f"preflight: {json.dumps(report, indent=2)}", flush=True)
    if not report["passed"]:
        raise PreflightError(f"preflight of iteration 0 (train.loss {report['objective']}): "
                             f"{alignment.failure_message(report)} Nothing was trained; the rollouts are kept "
                             f"(and the figures, in {figures_path}). preflight.enabled: false skips the check.")
    write_json(report, out_path)
    return report
