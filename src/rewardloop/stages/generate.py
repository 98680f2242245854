"""generate: sample ``images_per_prompt`` images for the iteration's prompts from model(it-1)."""

from __future__ import annotations

import numpy as np

from rewardloop.models import loading as models
from rewardloop.models.families import get_family

from rewardloop import prompts
from rewardloop.artifacts import provenance, write_table, write_tensors
from rewardloop.sampling.ddim import SamplerSettings, sample_seed
from rewardloop.runtime.sharding import shard_rows
from rewardloop.stages.common import SDEPlan, rollout, timed, to_arrow, torch_setup, write_metrics


def sampler_settings(generate_cfg, steps=None, eta=None, guidance_scale=None) -> SamplerSettings:
    """The sampler of ``generate``, with eval's steps, eta or guidance where given (None: generate's)."""
    return SamplerSettings(
        steps=steps or generate_cfg["steps"],
        guidance_scale=generate_cfg["guidance_scale"] if guidance_scale is None else guidance_scale,
        eta=generate_cfg["eta"] if eta is None else eta,
        resolution=generate_cfg["resolution"],
        scheduler=generate_cfg["scheduler"],
    )


def sde_selection(gen_cfg, seeds: list[list[int]], base_seed: int, iteration: int):
    """The rollout's :class:`SDEPlan` from ``generate.sde`` and its step strategy: the noise level, the SDE steps of
    each sample in rollout order, the step type, and MixGRPO-Flash's compress ratio where ``ode_after_window`` is
    DPM-Solver++."""
    from rewardloop.sampling.dpm_solver import DEFAULT_COMPRESS_RATIO
    from rewardloop.sampling.step_strategies import select_sde_steps

    sample_seeds = [s for row in seeds for s in row]
    iteration_seed = int(np.random.SeedSequence([base_seed, iteration + 1]).generate_state(1)[0])
    steps = select_sde_steps(gen_cfg["sde"], gen_cfg["steps"], sample_seeds, iteration_seed, iteration)
    sde = gen_cfg["sde"]
    flash = sde.get("ode_after_window", "euler") == "dpmsolver++"
    return SDEPlan(sde["noise_level"], steps, sde["type"],
                   sde.get("compress_ratio", DEFAULT_COMPRESS_RATIO) if flash else None)


def run(cfg, iteration: int, lora_dir, samples_path, latents_path, metrics_path, threads=1, progress=True,
        shard: int = 0, shards: int = 1, record_sde=False):
    """cfg: seed, model, prompts, generate, device. ``shard`` of ``shards``: only that run of batches.

    ``record_sde``: SDE rollouts for GRPO (recorded steps in latents.safetensors).
    """
    gen = cfg["generate"]
    metrics = {}
    device = torch_setup(threads, cfg["device"])
    with timed(metrics, "perf/model_load_time"):
        pipe = models.load_pipeline(cfg["model"], lora_dir=lora_dir, device=device,
                                    dtype=models.torch_dtype(gen["precision"]))
    table = prompts.select_prompts(
        prompts.load_prompts(cfg["prompts"]["train"], key="prompts.train"),
        gen["prompts_per_iteration"], cfg["seed"], iteration,
    )
    seeds = [[sample_seed(cfg["seed"], iteration, i, k) for k in range(gen["images_per_prompt"])]
             for i in range(len(table))]
    rows_slice = None
    if shards > 1:
        rows_slice = shard_rows(len(table) * gen["images_per_prompt"], gen["batch_size"], shards, shard,
                                key="generate.shards")
    with timed(metrics, "perf/rollout_time"):
        sde = sde_selection(gen, seeds, cfg["seed"], iteration) if record_sde else None
        rows, latents, tensors = rollout(pipe, get_family(cfg["model"]["family"]), table, seeds, sampler_settings(gen), gen["batch_size"],
                                         id_prefix=f"i{iteration:03d}", progress=progress, rows_slice=rows_slice,
                                         sde=sde)
    rows.insert(4, "iteration", iteration)
    meta = provenance(cfg, iteration, models.model_reference(cfg["model"], lora_dir))
    # tensors: each prompt's conditioning (and the empty prompt's), keyed <key>/<prompt_id>; SDE records
    tensors.update({f"latents/{sid}": lat for sid, lat in zip(rows.sample_id, latents)})
    write_tensors(tensors, latents_path, meta=meta, writer="generate")
    write_table(to_arrow(rows), samples_path, meta=meta, writer="generate")
    metrics.update({"iteration": iteration, "samples": len(rows), "prompts": int(rows.prompt_id.nunique())})
    write_metrics(metrics, metrics_path)

