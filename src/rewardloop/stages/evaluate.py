"""eval: held-out prompts × fixed seeds, deterministic DDIM (eta 0), scored like the rollouts.

Runs on the base model (``results/base/eval.parquet``) and on every exported iteration; nothing
downstream waits for it.
"""

from __future__ import annotations

from rewardloop.models import loading as models
from rewardloop.models.families import get_family

from rewardloop import prompts
from rewardloop.artifacts import provenance, write_table
from rewardloop.runtime.job_config import eval_guidance_scale
from rewardloop.sampling.ddim import sample_seed
from rewardloop.stages.common import rollout, timed, to_arrow, torch_setup, write_metrics
from rewardloop.stages.generate import sampler_settings
from rewardloop.stages.score import decode_samples, reward_stats, score_frame

EVAL_STREAM = -1  # seeds of eval images live apart from every rollout iteration's


def run(cfg, iteration, lora_dir, eval_path, metrics_path, threads=1, progress=True, name="eval"):
    """cfg: model, prompts, generate, eval, rewards, score, device. ``iteration`` None = base model.
    ``name``: the metrics' prefix, ``eval`` or a further guidance's (``eval_cfg1``, config.guidance_evals);
    the sample ids are ``eval_...`` at every guidance, so the same prompt and seed match across them."""
    metrics = {"iteration": -1 if iteration is None else iteration}
    device = torch_setup(threads, cfg["device"])
    pipe = models.load_pipeline(cfg["model"], lora_dir=lora_dir, device=device,
                                dtype=models.torch_dtype(cfg["generate"]["precision"]))
    table = prompts.load_prompts(cfg["prompts"]["eval"], key="prompts.eval")
    seeds = [[sample_seed(s, EVAL_STREAM, i, 0) for s in cfg["eval"]["seeds"]] for i in range(len(table))]
    settings = sampler_settings(cfg["generate"], steps=cfg["eval"]["steps"], eta=0.0,
                                guidance_scale=eval_guidance_scale(cfg))
    with timed(metrics, f"perf/{name}_time"):
        rows, _, _ = rollout(pipe, get_family(cfg["model"]["family"]), table, seeds, settings, cfg["generate"]["batch_size"],
                             id_prefix="eval", progress=progress, desc=name)
        rows.insert(4, "iteration", metrics["iteration"])  # -1: the base model, as in its metrics
        images = decode_samples(rows, "eval")
        scores = score_frame(rows, cfg["rewards"], cfg["score"]["batch_size"], "eval", progress, images)
        scores = _add_extra_rewards(scores, rows, images, cfg)
    scored = scores.merge(rows[["sample_id", "image"]], on="sample_id")
    model_ref = models.model_reference(cfg["model"], lora_dir)
    write_table(to_arrow(scored), eval_path, meta=provenance(cfg, iteration, model_ref))
    stats = reward_stats(scores, name)
    metrics[f"{name}/reward/mean"] = stats.pop(f"{name}/reward/raw_mean")
    metrics[f"{name}/reward/std"] = stats.pop(f"{name}/reward/raw_std")
    metrics.update(stats)
    write_metrics(metrics, metrics_path)


def _add_extra_rewards(scores, rows, images, cfg):
    """``eval.rewards``: extra ``reward_<name>`` columns, scored here only; ``reward`` stays the configured one."""
    extra = cfg["eval"].get("rewards") or {}
    if not extra:
        return scores
    extra_scores = score_frame(rows, extra, cfg["score"]["batch_size"], "eval (eval.rewards)", False, images)
    columns = [f"reward_{name}" for name in extra]
    return scores.assign(**{c: extra_scores[c].to_numpy() for c in columns})
