"""GPU smoke and benchmark: one shortened iteration of each GPU recipe on full-size replicas, no download.

For each recipe (EXPO's DPO on SD1.5 and SDXL, Flow-GRPO and DiffusionNFT on SD3.5-Medium, Flow-GRPO on FLUX.1-dev) this
builds a ``--size full`` replica of the family's published checkpoint (random weights, the real
dimensions: models/replicas.py), points the recipe at it with its smoke overlay (tiny reward
stand-ins: the reward models are not what is measured) at the recipe's own resolution, precision,
adapter and objective, and runs generate -> score -> pairs | advantages -> train in this process,
stage by stage. It prints, per recipe:
- rollout images/s, and training pairs/s (DPO) or samples/s (GRPO, NFT);
- peak GPU memory of each stage (torch.cuda.max_memory_allocated);
- model FLOP utilisation: the denoiser's forward FLOPs (torch's FlopCounterMode on meta tensors, as
  bench/count_dpo_flops.py counts them) times the forwards a stage runs, over its time and the
  device's dense bf16 peak (``--peak-tflops``, H100/H200 SXM: 989). A backward counts as two
  forwards; the counts per objective are in ``TRAIN_FORWARDS``.
With ``--fsdp N`` (N >= 2 GPUs) each recipe's train stage also runs launched in N processes twice, with
train.distributed ddp and fsdp, on the same rollouts: the two written models (LoRA or full UNet) must agree
(each tensor within 2 % of its norm, bf16) and the times of both are printed; a 2-process run on the CPU is
tests/workflow/test_fsdp_training.py, this is the GPU's (NCCL, cuda devices, models loaded on the CPU and
sharded onto the GPUs, bf16 gathers).
With ``--vlm-judge`` it then checks the vlm_judge reward against a real VLM served here
(bench/vlm_judge_smoke.py; skipped, saying why, without a cached judge or a server to serve it).
On one H200 the whole run is meant to take under 10 minutes (most of it building and saving the
replicas). ``--size tiny --device cpu`` runs the same on a CPU in a few minutes (figures
meaningless): tests/workflow/test_gpu_smoke.py does, so the script works the day a GPU is at hand.
Usage: python bench/gpu_smoke.py [--out /tmp/rewardloop-gpu-smoke] [--recipes a,b] [--size full] [--fsdp 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import time
import traceback
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ["sd15_pickscore_dpo", "sdxl_pickscore_dpo", "sd35m_ocr_grpo", "sd35m_pickscore_nft", "flux_dev_pickscore_grpo"]
# Shortened iteration: few prompts and steps, the recipe's resolution, batch sizes and precision kept.
GPU_SIZES = {"generate": {"prompts_per_iteration": 4, "images_per_prompt": 4, "steps": 10},
             "train": {"steps": 4, "gradient_accumulation_steps": 1, "checkpointing_steps": 1000},
             "eval": {"seeds": [0], "steps": 10}}
# Forward-equivalents per trained sample (pair for DPO) and recorded step or timestep; backward = 2 forwards.
TRAIN_FORWARDS = {
    "dpo": 2 * 3 + 2,  # policy forward + backward on chosen and rejected, the reference's forward on both
    "sft": 3,  # policy forward + backward on the chosen image
    "grpo": 3 + 1,  # policy forward + backward on a recorded step, the reference's forward (KL)
    "nft": 3 + 1 + 1,  # policy forward + backward, the old policy's forward, the reference's (KL)
    "awm": 3 + 1 + 1,  # policy forward + backward, the EMA's forward, the reference's (KL)
}


def stage_threads() -> int:
    """Threads for the stages' CPU work: OMP_NUM_THREADS where it is set (the tests set 1: more threads than
    free cores make torch's pool spin), else this machine's cores, at most 8."""
    return int(os.environ.get("OMP_NUM_THREADS") or min(8, os.cpu_count() or 1))


def denoiser_forward_flops(model_dir: Path, family, resolution: int, tokens: int) -> int:
    """FLOPs of one denoiser forward on one latent at ``resolution``: the model folder's configs, built on
    meta tensors (nothing is allocated or computed)."""
    import diffusers
    from torch.utils.flop_counter import FlopCounterMode

    config = json.loads((model_dir / family.denoiser / "config.json").read_text())
    vae = json.loads((model_dir / "vae" / "config.json").read_text())
    side = resolution // 2 ** (len(vae["block_out_channels"]) - 1)
    with torch.device("meta"):
        model = getattr(diffusers, config["_class_name"]).from_config(config)
        latents = torch.randn(1, family.latent_channels(config), side, side)
        if family.flow_matching:
            cond = {"prompt_embeds": torch.randn(1, tokens, config["joint_attention_dim"]),
                    "pooled_embeds": torch.randn(1, config["pooled_projection_dim"])}
        else:
            cond = {"prompt_embeds": torch.randn(1, tokens, config["cross_attention_dim"])}
            if "pooled_embeds" in family.conditioning:  # SDXL: the pooled width is what the added embedding takes
                pooled = config["projection_class_embeddings_input_dim"] - 6 * config["addition_time_embed_dim"]
                cond["pooled_embeds"] = torch.randn(1, pooled)
    with FlopCounterMode(display=False) as counter:
        family.predict(model, latents, torch.tensor([500.0]), cond, pixel_size=resolution)
    return counter.get_total_flops()


class Stage:
    """Times a stage and reads its peak GPU memory."""

    def __init__(self, name: str, cuda: bool):
        self.name, self.cuda = name, cuda

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self.started
        self.peak_gb = torch.cuda.max_memory_allocated() / 1e9 if self.cuda else float("nan")


def fsdp_check(cfg: dict, it: Path, signal: Path, gpus: int) -> dict:
    """The recipe's train stage launched in ``gpus`` processes under DDP, then FSDP, on the same rollouts: the
    largest relative difference of a written tensor, and each run's seconds."""
    from safetensors.torch import load_file

    from rewardloop.models.files import FULL_UNET_WEIGHTS, LORA_WEIGHTS
    from rewardloop.runtime.launch import run_launched

    weights = FULL_UNET_WEIGHTS if cfg["train"]["adapter"] == "none" else LORA_WEIGHTS
    written, seconds = {}, {}
    for mode in ("ddp", "fsdp"):
        run = it / mode
        job = {**cfg, "train": {**cfg["train"], "num_processes": gpus, "distributed": mode,
                                "mixed_precision": "bf16" if cfg["train"]["mixed_precision"] == "fp16"
                                else cfg["train"]["mixed_precision"]}}
        kwargs = dict(cfg=job, iteration=0, signal_path=str(signal), latents_path=str(it / "latents.safetensors"),
                      init_lora_dir=None, out_dir=str(run / "train"), state_dir=str(run / "state"),
                      metrics_path=str(run / "train.json"), threads=stage_threads(), progress=False)
        started = time.perf_counter()
        run_launched(kwargs, gpus, job["train"]["mixed_precision"], run / "state")
        seconds[mode] = time.perf_counter() - started
        written[mode] = load_file(run / "train" / weights)
    ddp, fsdp = written["ddp"], written["fsdp"]
    assert ddp.keys() == fsdp.keys(), "FSDP wrote other tensors than DDP"
    worst = max(((ddp[k].float() - fsdp[k].float()).norm() / (ddp[k].float().norm() + 1e-12)).item() for k in ddp)
    if worst > 0.02:
        raise AssertionError(f"FSDP's {weights} differs from DDP's: a tensor by {worst:.1%} of its norm")
    return {"fsdp_gpus": gpus, "fsdp_worst_rel_diff": worst, "ddp_train_s": seconds["ddp"],
            "fsdp_train_s": seconds["fsdp"]}


def recipe_run_config(name: str, out: Path, assets: Path, size: str, device: str) -> tuple[dict, float]:
    """The recipe's config for this script (its replica and reward stand-ins, the shortened sizes) and the
    seconds it took to build the replica and stand-ins (0 when ``assets`` already holds them)."""
    from rewardloop.config import deep_merge, load
    from rewardloop.smoke.overlay import recipe_config, write_overlay

    recipe = ROOT / "configs" / f"{name}.yaml"
    own = recipe_config(recipe)
    built = time.perf_counter()  # the replica and stand-ins, built and saved (on the CPU)
    overlay = yaml.safe_load(write_overlay(recipe, out / name, assets=assets, size=size).read_text())
    replica_s = time.perf_counter() - built
    # full size: the recipe's resolution and batch sizes; tiny: the overlay's (a CPU run of this script)
    kept = {"generate": {k: own["generate"][k] for k in ("resolution", "batch_size")},
            "train": {"batch_size": own["train"]["batch_size"]}} if size == "full" else {}
    sizes = deep_merge(GPU_SIZES, kept)
    return load(recipe, deep_merge(deep_merge(overlay, sizes), {"device": device})), replica_s


def run_recipe(name: str, out: Path, assets: Path, size: str, device: str, fsdp: int = 0) -> dict:
    from rewardloop.artifacts import read_table, read_tensors
    from rewardloop.models.families import get_family
    from rewardloop.objectives import get_objective
    from rewardloop.stages import advantages, generate, pairs, score, train

    cfg, replica_s = recipe_run_config(name, out, assets, size, device)
    family, objective = get_family(cfg["model"]["family"]), get_objective(cfg["train"]["loss"])
    it = out / name / "iter_000"
    it.mkdir(parents=True, exist_ok=True)
    cuda = device.startswith("cuda")
    stages = {}
    with Stage("generate", cuda) as stages["generate"]:
        generate.run(cfg, 0, None, it / "samples.parquet", it / "latents.safetensors", it / "generate.json",
                     threads=stage_threads(), progress=False, record_sde=objective.records_steps)
    with Stage("score", cuda) as stages["score"]:
        score.run(cfg, it / "samples.parquet", it / "scores.parquet", it / "score.json", progress=False)
    signal = it / f"{objective.signal}.parquet"
    if objective.signal == "pairs":
        pairs.run(cfg, it / "scores.parquet", signal, it / "pairs.json")
    else:
        advantages.run(cfg, it / "scores.parquet", signal, it / "advantages.json", objective.keeps_tied_groups)
    with Stage("train", cuda) as stages["train"]:
        train.run(cfg, 0, signal, it / "latents.safetensors", None, it / "train", it / "state", it / "train.json",
                  threads=stage_threads(), progress=False)
    metrics = json.loads((it / "train.json").read_text())
    checked = fsdp_check(cfg, it, signal, fsdp) if fsdp else {}
    gen = cfg["generate"]
    images = gen["prompts_per_iteration"] * gen["images_per_prompt"]
    cfg_passes = 2 if family.uses_cfg and gen["guidance_scale"] > 1 else 1  # an embedded guidance: one pass
    embeds = read_tensors(it / "latents.safetensors")[f"prompt_embeds/{read_table(it / 'samples.parquet').column('prompt_id')[0]}"]
    forward = denoiser_forward_flops(Path(cfg["model"]["path"]), family, gen["resolution"], embeds.shape[0])
    trained = metrics.get("pairs", metrics.get("samples", 0))
    per_sample = gen["steps"] if not objective.records_steps else gen["sde"]["num_sde_steps"]
    if objective.signal == "pairs":
        train_units, unit = cfg["train"]["steps"] * cfg["train"]["batch_size"], "pairs"
        train_flops = train_units * TRAIN_FORWARDS[objective.name] * forward
    else:
        steps = per_sample if objective.records_steps else max(1, int(gen["steps"] * 0.99))
        train_units, unit = trained, "samples"
        train_flops = trained * steps * TRAIN_FORWARDS[objective.name] * forward * (cfg_passes if objective.records_steps else 1)
    rollout_flops = images * gen["steps"] * cfg_passes * forward
    return {"recipe": name, "family": family.name, "resolution": gen["resolution"],
            "precision": gen["precision"], "forward_tflop": forward / 1e12,
            "rollout_images_per_s": images / stages["generate"].seconds,
            f"train_{unit}_per_s": train_units / stages["train"].seconds,
            "rollout_tflops": rollout_flops / stages["generate"].seconds / 1e12,
            "train_tflops": train_flops / stages["train"].seconds / 1e12,
            **{f"{s}_peak_gb": stage.peak_gb for s, stage in stages.items()},
            **{f"{s}_s": stage.seconds for s, stage in stages.items()}, "replica_s": replica_s, **checked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/rewardloop-gpu-smoke"))
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--family", help="only the recipes (of --recipes) whose model.family is this, e.g. flux")
    parser.add_argument("--size", choices=["full", "tiny"], default="full")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--drop-replicas", action="store_true",
                        help="delete a family's replicas once no later recipe needs them (full size: ~65 GB for all five)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the device's dense bf16 peak")
    parser.add_argument("--vlm-judge", action="store_true",
                        help="then check the vlm_judge reward against a real VLM (bench/vlm_judge_smoke.py)")
    parser.add_argument("--fsdp", type=int, default=0, metavar="N",
                        help="also train each recipe in N processes under DDP and FSDP and compare (N GPUs)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("no CUDA device (use --size tiny --device cpu to run the script on a CPU)")
    if args.fsdp and args.device.startswith("cuda") and torch.cuda.device_count() < args.fsdp:
        parser.error(f"--fsdp {args.fsdp}: one process per GPU, but {torch.cuda.device_count()} GPU(s) are visible")
    started = time.perf_counter()
    rows = []
    names = args.recipes.split(",")
    families = {n: yaml.safe_load((ROOT / "configs" / f"{n}.yaml").read_text()).get("model", {}).get("family")
                for n in names}
    if args.family:
        names = [n for n in names if families[n] == args.family]
        if not names:
            parser.error(f"--family {args.family}: none of the recipes {args.recipes} is of that family")
    failed = []
    for position, name in enumerate(names):
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)  # each recipe its own mixed precision
        try:
            row = run_recipe(name, args.out, args.out / "assets", args.size, args.device, args.fsdp)
        except Exception:  # one recipe's failure (e.g. out of memory) does not cost the others' figures
            traceback.print_exc()
            failed.append(name)
        else:
            rows.append(row)
            print(row_line(row, args.peak_tflops), flush=True)
            # written after every recipe: a run stopped at its time limit keeps what it measured
            (args.out / "gpu_smoke.json").write_text(json.dumps(rows, indent=2))
        if args.drop_replicas and families[name] not in {families[n] for n in names[position + 1:]}:
            for folder in (args.out / "assets").glob(f"replica-{families[name]}*"):
                shutil.rmtree(folder)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if args.vlm_judge:
        from vlm_judge_smoke import vlm_judge_check  # beside this script, so on sys.path

        try:
            print(json.dumps(vlm_judge_check(args.out / "vlm_judge", args.device)), flush=True)
        except Exception:
            traceback.print_exc()
            failed.append("vlm_judge")
    print(f"total {time.perf_counter() - started:.0f} s")
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


def row_line(row: dict, peak_tflops: float) -> str:
    unit = "pairs" if "train_pairs_per_s" in row else "samples"
    return (f"{row['recipe']} ({row['family']}, {row['resolution']} px, {row['precision']}): "
            f"rollout {row['rollout_images_per_s']:.2f} images/s, train {row[f'train_{unit}_per_s']:.2f} {unit}/s; "
            f"peak GPU memory generate {row['generate_peak_gb']:.1f} / score {row['score_peak_gb']:.1f} / "
            f"train {row['train_peak_gb']:.1f} GB; MFU rollout {row['rollout_tflops'] / peak_tflops:.1%}, "
            f"train {row['train_tflops'] / peak_tflops:.1%} (denoiser forward {row['forward_tflop']:.3f} TFLOP; "
            f"replica {row['replica_s']:.0f} s, generate {row['generate_s']:.0f} s, train {row['train_s']:.0f} s)"
            + (f"; {row['fsdp_gpus']} GPUs: DDP {row['ddp_train_s']:.0f} s, FSDP {row['fsdp_train_s']:.0f} s, "
               f"weights within {row['fsdp_worst_rel_diff']:.2%}" if "fsdp_gpus" in row else ""))

if __name__ == "__main__":
    main()
