"""Steady-state throughput of each GPU recipe, against the bare diffusers pipeline and against its target.

bench/gpu_smoke.py times one shortened iteration, model loads included; on a GPU the loads dominate it (one H200:
1.99 images/s for sd15_pickscore_dpo, 3.2 % utilisation). This measures what a long run sees, per recipe, at the
recipe's resolution, steps, guidance, batch size and precision (``--size full``; ``--size tiny`` on the CPU
proves the script, its figures mean nothing):
- **load**: the pipeline's load, timed apart;
- **rollouts**: our sampler (``stages.common.rollout``, what generate and eval run: seeded noise, decoding, PNG
  encoding) after one warm-up batch, images/s over ``--batches`` batches; then, in the same process on the
  same loaded weights, the bare diffusers pipeline (``pipeline_class()(**pipe.components)``, DDIM for the UNet
  families as eval samples) with the same prompts, steps, guidance and batch size: images/s and the ratio
  (goal: ours >= 0.95 of it);
- **training**: the recipe's train stage run twice on the same rollouts (bench/gpu_smoke.py's iteration), with
  ``--train-steps`` and three times as many optimizer steps: the extra steps over the extra time are the
  steady-state pairs/s (DPO, SFT) or samples/s, loading and the first steps cancelled out;
- **the diffusers DPO example's step** (pairs objectives): train_diffusion_dpo.py trains on the same loss (ours
  equals it: tests/unit/objectives) but VAE-encodes both images of every pair and runs the text encoder on every
  step, where ours reads the latents and embeddings generate cached. Its step is ours plus that encoding, which
  is timed here on the same weights, in the training's precision, at the recipe's resolution and batch size:
  its pairs/s = 1 / (1 / ours + the encoding's seconds per pair), and ours over it;
- **utilisation**: the denoiser's forward FLOPs (gpu_smoke.denoiser_forward_flops, on meta tensors) times the
  forwards over the time, against ``--peak-tflops`` (H100/H200 SXM dense bf16: 989);
- **memory**: the peak GPU memory of the rollouts and of the training, beside bench/memory_plan.py's estimate of
  the weights, gradients and optimizer states (activations are what the difference is).
Each recipe's figures are printed with its target (issue 43: for one H100/H200) and saved to
``<out>/steady_state.json`` as they come, so a run cut off at its time limit keeps what it measured.
Usage: python bench/steady_state.py [--size full|tiny] [--device cuda|cpu] [--recipes a,b] [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_smoke  # noqa: E402

# Targets on one H100/H200 at the recipe's settings (issue 43); None: no target for that figure.
TARGETS = {
    "sd15_pickscore_dpo": {"rollout_images_per_s": 4.0, "train_per_s": 25.0},
    "sdxl_pickscore_dpo": {"rollout_images_per_s": None, "train_per_s": None},
    "sd35m_ocr_grpo": {"rollout_images_per_s": 5.0, "train_per_s": None},
    "sd35m_pickscore_nft": {"rollout_images_per_s": 5.0, "train_per_s": None},
    "flux_dev_pickscore_grpo": {"rollout_images_per_s": 2.0, "train_per_s": None},
}
BARE_RATIO_GOAL = 0.95


def rollout_figures(cfg: dict, batches: int) -> dict:
    """Load, then our rollouts and the bare pipeline's, each after a warm-up batch, on the same weights."""
    import diffusers
    import pandas as pd

    from rewardloop import prompts
    from rewardloop.models import loading as models
    from rewardloop.models.families import get_family
    from rewardloop.sampling.ddim import sample_seed
    from rewardloop.stages.common import rollout
    from rewardloop.stages.generate import sampler_settings

    gen, cuda = cfg["generate"], cfg["device"].startswith("cuda")
    family, batch = get_family(cfg["model"]["family"]), gen["batch_size"]
    with gpu_smoke.Stage("load", cuda) as load:
        pipe = models.load_pipeline(cfg["model"], device=cfg["device"], dtype=models.torch_dtype(gen["precision"]))
    table = prompts.load_prompts(cfg["prompts"]["train"], key="prompts.train")
    chosen = [table.prompt.iloc[i % len(table)] for i in range(batch)]  # one image per prompt, a batch of them
    rows = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(batch)], "prompt": chosen})
    settings = sampler_settings(gen, eta=0.0)

    def ours(run: int):
        seeds = [[sample_seed(cfg["seed"], run, i, 0)] for i in range(batch)]
        rollout(pipe, family, rows, seeds, settings, batch, id_prefix="bench", progress=False)

    bare = family.pipeline_class()(**pipe.components)
    bare.set_progress_bar_config(disable=True)
    if not family.flow_matching:
        bare.scheduler = diffusers.DDIMScheduler.from_config(pipe.scheduler.config)

    def theirs(run: int):
        generator = torch.Generator().manual_seed(run)
        bare(chosen, num_inference_steps=settings.steps, guidance_scale=settings.guidance_scale,
             height=settings.resolution, width=settings.resolution, generator=generator, output_type="pil")

    # The bare pipeline first: our decoding moves a force_upcast VAE to fp32 under fp16 for good (as
    # StableDiffusionXLPipeline does; StableDiffusionPipeline decodes in fp16), which the bare SD1.5 one refuses.
    theirs(-1)
    with gpu_smoke.Stage("bare pipeline", cuda) as bare_run:
        for run in range(batches):
            theirs(run)
    ours(-1)
    with gpu_smoke.Stage("rollouts", cuda) as our_run:
        for run in range(batches):
            ours(run)
    images = batches * batch
    tokens = family.encode(pipe, chosen[:1])["prompt_embeds"].shape[1]  # the text length the denoiser attends to
    del pipe, bare
    gc.collect()
    return {"load_s": load.seconds, "rollout_images_per_s": images / our_run.seconds,
            "bare_images_per_s": images / bare_run.seconds, "rollout_vs_bare": bare_run.seconds / our_run.seconds,
            "rollout_peak_gb": our_run.peak_gb, "rollout_batch": batch,
            "rollout_steps": settings.steps, "guidance_scale": settings.guidance_scale, "text_tokens": tokens}


def training_figures(cfg: dict, it: Path, steps: int) -> dict:
    """Steady-state trained units per second, from the train stage run twice on the same rollouts: a pairs
    objective with ``steps`` and ``3 * steps`` optimizer steps (units: pairs), the others with 1 and 3 passes over
    the iteration's samples (``inner_epochs``; units: samples). The extra units over the extra seconds."""
    from rewardloop.objectives import get_objective
    from rewardloop.stages import train

    cuda, loss = cfg["device"].startswith("cuda"), cfg["train"]["loss"]
    objective = get_objective(loss)
    signal = it / f"{objective.signal}.parquet"
    pairs = objective.signal == "pairs"
    seconds, peaks, units = {}, {}, {}
    for scale in (1, 3):
        run = it / f"steady_train_x{scale}"
        job = {**cfg, "train": {**cfg["train"], "gradient_accumulation_steps": 1}}
        if pairs:
            job["train"].update(steps=scale * steps, checkpointing_steps=10 * steps)
        else:
            job["train"][loss] = {**(cfg["train"].get(loss) or {}), "inner_epochs": scale}
        with gpu_smoke.Stage(f"train x{scale}", cuda) as stage:
            train.run(job, 0, signal, it / "latents.safetensors", None, run / "train", run / "state",
                      run / "train.json", threads=gpu_smoke.stage_threads(), progress=False)
        seconds[scale], peaks[scale] = stage.seconds, stage.peak_gb
        if scale == 1 and not pairs:  # a pass over the samples: the train stage's count of them (train.json "samples")
            per_pass = json.loads((run / "train.json").read_text())["samples"]
        units[scale] = scale * (steps * cfg["train"]["batch_size"] if pairs else per_pass)
    extra_s = seconds[3] - seconds[1]
    if extra_s <= 0 or units[3] <= units[1]:
        raise RuntimeError(f"the longer training run was not longer ({seconds}, units {units}): no steady state")
    rate = (units[3] - units[1]) / extra_s
    return {"train_unit": "pairs" if pairs else "samples", "train_per_s": rate, "train_peak_gb": peaks[3],
            "train_startup_s": seconds[1] - units[1] / rate}


def dpo_example_figures(cfg: dict, row: dict, batches: int) -> dict:
    """The diffusers DPO example's pairs/s: our step plus its per-step encoding of both images and the prompt."""
    from rewardloop.models import loading as models
    from rewardloop.models.families import get_family

    family, cuda = get_family(cfg["model"]["family"]), cfg["device"].startswith("cuda")
    mixed = cfg["train"]["mixed_precision"]
    pipe = models.load_pipeline(cfg["model"], device=cfg["device"],
                                dtype=models.torch_dtype("fp32" if mixed == "no" else mixed))
    pairs, side = cfg["train"]["batch_size"], cfg["generate"]["resolution"]
    generator = torch.Generator().manual_seed(0)
    pixels = (torch.rand(2 * pairs, 3, side, side, generator=generator) * 2 - 1).to(cfg["device"], pipe.vae.dtype)
    prompts = ["a photo of a cat wearing a hat"] * pairs

    @torch.no_grad()
    def encode():  # as train_diffusion_dpo.py does per step: vae.encode(...).latent_dist.sample(), the text encoder
        family.encode_pixels(pipe.vae, pixels)
        family.encode(pipe, prompts)

    encode()  # warm-up
    with gpu_smoke.Stage("dpo example encoding", cuda) as stage:
        for _ in range(batches):
            encode()
    del pipe
    gc.collect()
    per_pair = stage.seconds / (batches * pairs)
    example = 1.0 / (1.0 / row["train_per_s"] + per_pair)
    return {"example_encode_s_per_pair": per_pair, "example_pairs_per_s": example,
            "train_vs_example": row["train_per_s"] / example}


def utilisation(cfg: dict, row: dict, peak_tflops: float) -> dict:
    """Model FLOP utilisation of the rollouts (forwards per image: steps x CFG passes) and, for DPO, training."""
    from rewardloop.models.families import get_family
    from rewardloop.objectives import get_objective

    family, objective = get_family(cfg["model"]["family"]), get_objective(cfg["train"]["loss"])
    forward = gpu_smoke.denoiser_forward_flops(Path(cfg["model"]["path"]), family, cfg["generate"]["resolution"],
                                               row["text_tokens"])
    passes = 2 if family.uses_cfg and row["guidance_scale"] > 1 else 1
    rollout = row["rollout_images_per_s"] * row["rollout_steps"] * passes * forward
    figures = {"forward_tflop": forward / 1e12, "rollout_mfu": rollout / (peak_tflops * 1e12)}
    if objective.signal == "pairs":
        train = row["train_per_s"] * gpu_smoke.TRAIN_FORWARDS[objective.name] * forward
        figures["train_mfu"] = train / (peak_tflops * 1e12)
    return figures


def planned_gb(name: str) -> dict:
    """bench/memory_plan.py's estimate for the recipe (weights, gradients, optimizer states; no activations)."""
    import memory_plan

    plan = memory_plan.plan(gpu_smoke.ROOT / "configs" / f"{name}.yaml")
    return {"planned_generate_gb": plan["generate_gb"], "planned_train_gb": plan["train_gb"]}


def measure(name: str, args) -> dict:
    cfg, _ = gpu_smoke.recipe_run_config(name, args.out, args.out / "assets", args.size, args.device)
    if args.size == "full":  # the recipe's own steps: the targets are stated at them
        from rewardloop.smoke.overlay import recipe_config

        cfg["generate"]["steps"] = recipe_config(gpu_smoke.ROOT / "configs" / f"{name}.yaml")["generate"]["steps"]
    row = {"recipe": name, "family": cfg["model"]["family"], "size": args.size, "device": args.device,
           "resolution": cfg["generate"]["resolution"], "precision": cfg["generate"]["precision"]}
    row.update(rollout_figures(cfg, args.batches))
    gpu_smoke.run_recipe(name, args.out, args.out / "assets", args.size, args.device)  # the rollouts to train on
    row.update(training_figures(cfg, args.out / name / "iter_000", args.train_steps))
    if row["train_unit"] == "pairs":
        row.update(dpo_example_figures(cfg, row, args.batches))
    row.update(utilisation(cfg, row, args.peak_tflops))
    if args.size == "full":
        row.update(planned_gb(name))
    return row


def against(value: float, target: float | None, size: str) -> str:
    if target is None:
        return "no target"
    if size != "full":
        return f"target {target:g} (at full size on a GPU)"
    return f"target {target:g}: {'met' if value >= target else 'NOT met'}"


def row_line(row: dict) -> str:
    target = TARGETS.get(row["recipe"], {})
    ratio = row["rollout_vs_bare"]
    return (f"{row['recipe']} ({row['family']}, {row['resolution']} px, {row['precision']}, {row['size']}, "
            f"{row['device']}): load {row['load_s']:.1f} s; rollouts {row['rollout_images_per_s']:.2f} images/s "
            f"({against(row['rollout_images_per_s'], target.get('rollout_images_per_s'), row['size'])}), bare "
            f"pipeline {row['bare_images_per_s']:.2f}, ours/bare {ratio:.2f} (goal >= {BARE_RATIO_GOAL}: "
            f"{'met' if ratio >= BARE_RATIO_GOAL else 'NOT met'}); train {row['train_per_s']:.2f} "
            f"{row['train_unit']}/s ({against(row['train_per_s'], target.get('train_per_s'), row['size'])}), "
            f"{row['train_startup_s']:.1f} s to its first step"
            + (f", the diffusers DPO example's step {row['example_pairs_per_s']:.2f} pairs/s (it encodes "
               f"{row['example_encode_s_per_pair'] * 1e3:.0f} ms per pair; ours/example {row['train_vs_example']:.2f})"
               if "example_pairs_per_s" in row else "")
            + f"; MFU rollouts {row['rollout_mfu']:.1%}"
            + (f", train {row['train_mfu']:.1%}" if "train_mfu" in row else "")
            + f"; peak memory rollouts {row['rollout_peak_gb']:.1f} GB, train {row['train_peak_gb']:.1f} GB"
            + (f" (planned without activations: {row['planned_generate_gb']:.1f} / {row['planned_train_gb']:.1f} GB)"
               if "planned_train_gb" in row else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/rewardloop-steady-state"))
    parser.add_argument("--recipes", default=",".join(gpu_smoke.RECIPES))
    parser.add_argument("--size", choices=["full", "tiny"], default="full")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batches", type=int, default=3, help="timed rollout batches after the warm-up one")
    parser.add_argument("--train-steps", type=int, default=4, help="the shorter of the two training runs' steps")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the device's dense bf16 peak")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("no CUDA device (use --size tiny --device cpu to run the script on a CPU)")
    args.out.mkdir(parents=True, exist_ok=True)
    rows, failed = [], []
    for name in args.recipes.split(","):
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)  # each recipe its own mixed precision
        try:
            row = measure(name, args)
        except Exception:  # one recipe's failure (e.g. out of memory) does not cost the others' figures
            traceback.print_exc()
            failed.append(name)
            continue
        rows.append(row)
        print(row_line(row), flush=True)
        (args.out / "steady_state.json").write_text(json.dumps(rows, indent=2))
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if rows:
        print(summary_table(rows))
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


def summary_table(rows: list[dict]) -> str:
    """One line per recipe: the steady-state figures, ours over the bare pipeline, each against its target."""
    from rewardloop.reports.text_tables import aligned

    def target(row, key):
        value = TARGETS.get(row["recipe"], {}).get(key)
        return "-" if value is None else f"{value:g}"

    body = [[r["recipe"], r["device"], f"{r['load_s']:.1f}", f"{r['rollout_images_per_s']:.2f}",
             target(r, "rollout_images_per_s"), f"{r['bare_images_per_s']:.2f}", f"{r['rollout_vs_bare']:.2f}",
             f"{r['train_per_s']:.2f} {r['train_unit']}", target(r, "train_per_s"),
             f"{r['train_vs_example']:.2f}" if "train_vs_example" in r else "-", f"{r['rollout_mfu']:.1%}",
             f"{r['train_mfu']:.1%}" if "train_mfu" in r else "-"] for r in rows]
    return aligned(["recipe", "device", "load s", "images/s", "target", "bare", "ours/bare", "train /s", "target",
                    "ours/DPO example", "MFU roll", "MFU train"], body)


if __name__ == "__main__":
    main()
