"""benchmark: one model (the base, or an iteration's checkpoint) on a benchmark's prompt set, scored per image.

The images are sampled as the eval samples them (the run's model, resolution, scheduler, precision, eval
steps and guidance, deterministic DDIM, eta 0) with seeds of their own stream, the same for every
checkpoint, so base and checkpoints see the same noise per prompt. Each metric is a registered reward
(``reward_<name>`` columns, scored by rewards.combine.RewardSet as the score stage does). The table keeps
the scores, not the images.
"""

from __future__ import annotations

from rewardloop.artifacts import provenance, write_table
from rewardloop.runtime.job_config import eval_guidance_scale
from rewardloop.sampling.ddim import sample_seed
from rewardloop.stages.common import rollout, to_arrow, torch_setup
from rewardloop.stages.generate import sampler_settings
from rewardloop.stages.score import decode_samples, score_frame

# The seeds' stream: sample_seed's "iteration", beyond any iteration folder's number (3 digits) and apart
# from the eval's (-1), so benchmark images share no noise with rollouts or the eval.
BENCHMARK_STREAM = 10 ** 6
ID_PREFIX = "bench"


def settings(cfg, metrics: dict, images_per_prompt: int, seed: int) -> dict:
    """What a benchmark table depends on besides its prompts and its model: its provenance's config,
    compared on a rerun (a file written with other settings is not reused)."""
    generate = {key: cfg["generate"][key] for key in ("resolution", "scheduler", "precision")}
    return {"model": cfg["model"], "generate": generate, "steps": cfg["eval"]["steps"],
            "guidance_scale": eval_guidance_scale(cfg), "metrics": metrics,
            "images_per_prompt": images_per_prompt, "seed": seed}


def load_model(cfg, lora_dir, device: str = "cpu", threads: int = 1):
    """The run's model with ``lora_dir`` (None: the base), loaded once for every prompt set run on it."""
    from rewardloop.models import loading as models

    return models.load_pipeline(cfg["model"], lora_dir=lora_dir, device=torch_setup(threads, device),
                                dtype=models.torch_dtype(cfg["generate"]["precision"]))


def run(cfg, pipe, prompts, iteration, lora_dir, out_path, metrics: dict, images_per_prompt: int, seed: int,
        prompts_digest: str, batch_size: int, score_batch_size: int, progress: bool = True, desc: str = "benchmark",
        reward_set=None):
    """Sample ``images_per_prompt`` images per row of ``prompts`` (prompt_id, prompt, category, and metadata for
    a set that has it: each image's goes with it to the metrics that take it) with ``pipe`` (load_model's: the
    base model with ``lora_dir``, None for the base), score them with ``metrics`` (a rewards mapping; its
    RewardSet ``reward_set`` when already built) and write ``out_path``: one row per image, the sample keys,
    category, ``reward_<metric>`` and reward_details."""
    from rewardloop.models import loading as models
    from rewardloop.models.families import get_family

    seeds = [[sample_seed(seed, BENCHMARK_STREAM, i, k) for k in range(images_per_prompt)]
             for i in range(len(prompts))]
    sampler = sampler_settings(cfg["generate"], steps=cfg["eval"]["steps"], eta=0.0,
                               guidance_scale=eval_guidance_scale(cfg))
    rows, _, _ = rollout(pipe, get_family(cfg["model"]["family"]), prompts[["prompt_id", "prompt"]], seeds, sampler,
                         batch_size, id_prefix=ID_PREFIX, progress=progress, desc=desc)
    rows.insert(4, "iteration", -1 if iteration is None else iteration)
    metadata = None  # each image's prompt metadata (geneval), sent with it to a remote metric's server
    if "metadata" in prompts.columns:
        metadata = rows.prompt_id.map(dict(zip(prompts.prompt_id, prompts.metadata))).tolist()
    scores = score_frame(rows, metrics, score_batch_size, desc, progress, decode_samples(rows, desc), metadata,
                         reward_set)
    scores = scores.drop(columns=["reward"])  # the weighted sum of the metrics: no benchmark's number
    scores.insert(3, "category", scores.prompt_id.map(dict(zip(prompts.prompt_id, prompts.category))))
    meta = provenance(settings(cfg, metrics, images_per_prompt, seed), iteration,
                      models.model_reference(cfg["model"], lora_dir))
    meta["prompts_digest"] = prompts_digest
    write_table(to_arrow(scores), out_path, meta=meta, writer="benchmark")
    return scores
