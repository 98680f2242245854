"""What each stage pays to load the diffusion model, per job, on a full-size replica (issue 33 §4).

Builds a random-weight replica with the published layout and dimensions (`rewardloop build-replica
--size full`, default SD1.5) and a LoRA of the family's default targets (rank 8), reads every file
once (the page cache holds them, as on a node that ran the previous stage), then times in a fresh
process per measurement, as a job would:
- the imports a model job pays before loading (torch, diffusers, transformers, peft);
- the base pipeline (what generate(0) and eval_base load), and generate / eval / preflight: the
  pipeline with model(it-1)'s LoRA fused (`models.load_pipeline`), the difference being the fusing;
- train: the pipeline without its text encoders (`stages.train.load_models`), and the same with a
  frozen `previous` reference (a second load);
(export with `export.merged` loads as generate does, then saves.)
Prints seconds per stage and what an iteration pays in loads on the CPU (generate + train + eval; the
preflight once). A GPU run pays these plus moving the weights to the device (not measured here).
Usage: python bench/bench_model_loads.py [--family sd15] [--repeat 2] [--keep DIR] [--size tiny]
SD3.5-Medium (`--family sd3`, with T5-XXL: ~7 B parameters, ~15 GB in fp16) needs ~16 GB of free
memory in bf16 (`--dtype bfloat16`) and more to build.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STAGES = {  # name: the Python that loads, given MODEL (model config) and LORA (a LoRA folder)
    "imports": "pass",
    "base pipeline (generate(0), eval_base)": "models.load_pipeline(MODEL, dtype=DTYPE)",
    "generate, eval, preflight (LoRA fused)": "models.load_pipeline(MODEL, lora_dir=LORA, dtype=DTYPE)",
    "train (no text encoders)": "load_models(MODEL, 'lora', None, LORA, 'cpu')",
    "train, reference: previous": "load_models(MODEL, 'lora', 'previous', LORA, 'cpu')",
}
PROBE = """
import json, sys, time
started = time.perf_counter()
import torch, diffusers, transformers, peft
from rewardloop.models import loading as models
from rewardloop.stages.train import load_models
imported = time.perf_counter()
MODEL, LORA, DTYPE = json.loads(sys.argv[1]), sys.argv[2], getattr(torch, sys.argv[3])
torch.set_num_threads(1)
loaded = time.perf_counter()
{call}
print(json.dumps({{"imports": imported - started, "load": time.perf_counter() - loaded}}))
"""


def build(family: str, out: Path, size: str) -> tuple[dict, Path]:
    """The replica and a LoRA of the family's default targets beside it."""
    import torch

    from rewardloop.models import loading as models
    from rewardloop.models.families import get_family
    from rewardloop.models.lora import attach_lora, save_lora
    from rewardloop.models.replicas import build_replica

    build_replica(family, out / "model", size=size, seed=0)
    model = {"family": family, "path": str(out / "model"), "variant": None}
    lora_cfg = {"rank": 8, "alpha": 8, "targets": list(get_family(family).lora_targets)}
    pipe = models.load_pipeline(model, text_encoders=False)
    denoiser = getattr(pipe, get_family(family).denoiser)
    with torch.no_grad():
        for param in attach_lora(denoiser, lora_cfg):
            param.normal_(0, 1e-3)
    save_lora(denoiser, family, lora_cfg, out / "lora")
    return model, out / "lora"


def warm_page_cache(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 24):
                    total += len(chunk)
    return total


def measure(call: str, model: dict, lora: Path, dtype: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE.format(call=call), json.dumps(model), str(lora), dtype],
                         capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if out.returncode != 0:
        raise SystemExit(f"{call} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="sd15", choices=["sd15", "sdxl", "sd3", "flux"])
    parser.add_argument("--dtype", default="float32", help="the dtype stages load in (float32 on the CPU)")
    parser.add_argument("--repeat", type=int, default=2, help="processes per stage; the best is printed")
    parser.add_argument("--keep", help="build (or reuse) the replica and LoRA in this folder")
    parser.add_argument("--size", default="full", choices=["full", "tiny"], help="tiny: check the bench in seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rewardloop-loads-") as tmp:
        folder = Path(args.keep or tmp)
        if (folder / "lora").is_dir():
            model, lora = {"family": args.family, "path": str(folder / "model"), "variant": None}, folder / "lora"
        else:
            model, lora = build(args.family, folder, args.size)
        size = warm_page_cache(folder)
        print(f"{args.family} {args.size} replica: {size / 2 ** 30:.2f} GiB on disk (page cache warmed), "
              f"loads in {args.dtype}, 1 torch thread")
        best = {}
        for stage, call in STAGES.items():
            runs = [measure(call, model, lora, args.dtype) for _ in range(args.repeat)]
            best[stage] = min(run["load"] for run in runs) if stage != "imports" else min(
                run["imports"] for run in runs)
            print(f"  {stage:38s} {best[stage]:7.1f} s", flush=True)
        if not args.keep:
            shutil.rmtree(folder / "model", ignore_errors=True)
    stage_load = best["generate, eval, preflight (LoRA fused)"]
    per_iteration = 2 * (best["imports"] + stage_load) + best["imports"] + best["train (no text encoders)"]
    print(f"per iteration (generate + train + eval, imports included): {per_iteration:.1f} s of loading; "
          f"generate and eval load model(it-1) and model(it): {2 * stage_load:.1f} s of it")


if __name__ == "__main__":
    main()
