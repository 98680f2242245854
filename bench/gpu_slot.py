"""One GPU slot that measures everything: full-size replicas drawn on the device, every GPU recipe's steady-state
figures, our sampler against each family's diffusers pipeline in the recipe's precision, and DDP against FSDP
where two GPUs are lent, within one time budget, saving JSON as it goes.

    python bench/gpu_slot.py --out /tmp/slot                          # one H100/H200: the whole slot
    python bench/gpu_slot.py --size tiny --device cpu --out /tmp/slot  # the rehearsal on a CPU (figures meaningless)

Family by family (SD1.5, SDXL, SD3.5-Medium, FLUX.1-dev; the recipes of bench/gpu_smoke.py), so that at most
one family's replica is on disk at a time (all four at full size are ~65 GB):
1. **replica**: the family's ``--size`` replica of its published checkpoint, its random weights drawn on the
   device in the stored dtype (``build_replica(device=...)``, not drawn on the CPU and copied), then
   written as published and loaded back through the same code path as a real checkpoint;
2. **steady state** of each of the family's recipes (bench/steady_state.py: load timed apart, our rollouts
   against the bare pipeline on the same weights, training from two runs, utilisation, peak memory against the
   memory plan, each against its target); with ``--fsdp N`` (default: 2 where two GPUs are visible) the recipe's
   train stage also runs in N processes under DDP and FSDP and the two written models are compared
   (bench/gpu_smoke.py ``fsdp_check``);
3. **fidelity** in the family's recipe precision (bench/pipeline_fidelity.py, as its CPU test, at ``--fidelity-
   resolution`` and a few steps): every denoiser call's timestep and conditioning bit-identical to the
   pipeline's, the rest within the bound; with and without an exported LoRA loaded by ``load_lora_weights``.
Before each step the time left is checked: a step that would start past ``--budget-s`` is recorded as skipped,
with the reason. ``<out>/gpu_slot.json`` is rewritten after every step (a run cut off at the device's time limit
keeps what it measured); the steady-state rows also go to ``<out>/steady_state.json``. A failed step (out of
memory, a fidelity mismatch) is recorded with its error and the slot goes on; the exit status says which failed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import traceback
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_smoke  # noqa: E402
import pipeline_fidelity  # noqa: E402
import steady_state  # noqa: E402

# Steps of the fidelity check: those tests/unit/models/test_half_precision_fidelity.py measured its bound at (a
# fused fp16 LoRA's rounding is a larger share of the drift after 4 large DDIM steps than after 6)
FIDELITY_STEPS = {"sd3": 10, "flux-schnell": 4}
DEFAULT_FIDELITY_STEPS = 6
# The precision each family's recipes run in (bench/gpu_smoke.RECIPES), which fidelity is checked in
PRECISIONS = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


class Slot:
    """The slot's record: what each step measured, skipped or failed, saved after every step."""

    def __init__(self, out: Path, budget_s: float, args):
        self.out, self.budget_s, self.started = out, budget_s, time.perf_counter()
        self.record = {"device": device_name(args.device), "size": args.size, "budget_s": budget_s, "steps": []}
        self.failed: list[str] = []

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def step(self, kind: str, name: str, work) -> dict | None:
        """Run ``work()`` unless the budget is spent; record its figures (or the skip, or the error) and save."""
        entry = {"step": kind, "name": name, "started_s": round(self.elapsed(), 1)}
        if self.elapsed() >= self.budget_s:
            entry["skipped"] = f"the {self.budget_s:.0f} s budget was spent"
            result = None
        else:
            started = time.perf_counter()
            try:
                result = work()
            except Exception as exc:  # one step's failure (out of memory, a mismatch) costs not the others
                traceback.print_exc()
                entry["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                self.failed.append(f"{kind} {name}")
                result = None
            else:
                entry["figures"] = result
            entry["seconds"] = round(time.perf_counter() - started, 2)
        self.record["steps"].append(entry)
        self.record["elapsed_s"] = round(self.elapsed(), 1)
        (self.out / "gpu_slot.json").write_text(json.dumps(self.record, indent=2, default=float))
        print(step_line(entry), flush=True)
        return result


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(torch.device(device))} x{torch.cuda.device_count()}"
    import platform

    return f"CPU ({platform.processor() or platform.machine()})"


def step_line(entry: dict) -> str:
    head = f"[{entry['started_s']:7.1f} s] {entry['step']} {entry['name']}"
    if "skipped" in entry:
        return f"{head}: skipped ({entry['skipped']})"
    if "error" in entry:
        return f"{head}: FAILED after {entry['seconds']:.1f} s: {entry['error'].splitlines()[0]}"
    return f"{head}: {entry['seconds']:.1f} s"


def families_of(recipes: list[str]) -> dict[tuple, dict]:
    """The recipes grouped by the replica they run on, (family, variant) -> {"recipes": names in order,
    "sampling": the distinct (precision, guidance) they sample at}."""
    from rewardloop.config.defaults import sampling_precision
    from rewardloop.models.replicas import variant_of
    from rewardloop.smoke.overlay import recipe_config

    groups: dict[tuple, dict] = {}
    for name in recipes:
        config = recipe_config(gpu_smoke.ROOT / "configs" / f"{name}.yaml")
        family, gen = config["model"]["family"], config["generate"]
        precision = sampling_precision(gen, config["train"])
        group = groups.setdefault((family, variant_of(family, config["model"]["path"])),
                                  {"recipes": [], "sampling": []})
        group["recipes"].append(name)
        if (precision, gen["guidance_scale"]) not in group["sampling"]:
            group["sampling"].append((precision, gen["guidance_scale"]))
    return groups


def build(family: str, variant: str | None, args) -> dict:
    from rewardloop.smoke.overlay import replica

    folder = replica_folder(family, variant, args)
    shutil.rmtree(folder, ignore_errors=True)  # drawn now, on this device (a folder from another run is not timed)
    started = time.perf_counter()
    replica(family, args.out / "assets", args.size, variant, device=args.device)
    seconds = time.perf_counter() - started
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return {"folder": str(folder), "gb": size / 1e9, "build_s": seconds}


def replica_folder(family: str, variant: str | None, args) -> Path:
    from rewardloop.smoke import overlay

    return overlay.replica_folder(family, args.out / "assets", args.size, variant)


def steady(name: str, args) -> dict:
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # each recipe its own mixed precision
    row = steady_state.measure(name, args)
    print(steady_state.row_line(row), flush=True)
    rows_path = args.out / "steady_state.json"
    rows = json.loads(rows_path.read_text()) if rows_path.is_file() else []
    rows_path.write_text(json.dumps([*rows, row], indent=2))
    return row


def fsdp(name: str, args) -> dict:
    cfg, _ = gpu_smoke.recipe_run_config(name, args.out, args.out / "assets", args.size, args.device)
    it = args.out / name / "iter_000"
    from rewardloop.objectives import get_objective

    signal = it / f"{get_objective(cfg['train']['loss']).signal}.parquet"
    return gpu_smoke.fsdp_check(cfg, it, signal, args.fsdp)


def fidelity(family: str, variant: str | None, precision: str, guidance: float, with_lora: bool, args) -> dict:
    folder = replica_folder(family, variant, args)
    dtype = PRECISIONS[precision]
    lora = None
    if with_lora:
        lora = pipeline_fidelity.random_lora(folder, family, args.out / f"lora-{family}", args.device, dtype)
    steps = FIDELITY_STEPS.get(family + (f"-{variant}" if variant == "schnell" else ""), DEFAULT_FIDELITY_STEPS)
    return pipeline_fidelity.compare(folder, family, dtype, steps, guidance, args.fidelity_resolution, lora,
                                     args.device)


def run(args) -> Slot:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "steady_state.json").unlink(missing_ok=True)
    slot = Slot(args.out, args.budget_s, args)
    for (family, variant), group in families_of(args.recipes.split(",")).items():
        label = family + (f"-{variant}" if variant else "")
        if slot.step("replica", label, lambda: build(family, variant, args)) is None:
            continue  # nothing of the family can run without its replica
        for name in group["recipes"]:
            if slot.step("steady-state", name, lambda: steady(name, args)) is not None and args.fsdp:
                slot.step(f"ddp-vs-fsdp x{args.fsdp}", name, lambda: fsdp(name, args))
        for precision, guidance in group["sampling"]:
            for with_lora in (False, True):
                slot.step("fidelity", f"{label} {precision} cfg {guidance:g}" + (" exported-lora" * with_lora),
                          lambda: fidelity(family, variant, precision, guidance, with_lora, args))
        if args.drop_replicas:
            shutil.rmtree(replica_folder(family, variant, args), ignore_errors=True)
        pipeline_fidelity.release()
    rows = [s["figures"] for s in slot.record["steps"] if s["step"] == "steady-state" and "figures" in s]
    if rows:
        print(steady_state.summary_table(rows))
    print(f"total {slot.elapsed():.0f} s of the {args.budget_s:.0f} s budget; {args.out / 'gpu_slot.json'}")
    return slot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/rewardloop-gpu-slot"))
    parser.add_argument("--recipes", default=",".join(gpu_smoke.RECIPES))
    parser.add_argument("--size", choices=["full", "tiny"], default="full")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget-s", type=float, default=540.0,
                        help="no step starts after this many seconds (a device call's limit is 600)")
    parser.add_argument("--batches", type=int, default=3, help="timed rollout batches after the warm-up one")
    parser.add_argument("--train-steps", type=int, default=4, help="the shorter of the two training runs' steps")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the device's dense bf16 peak")
    parser.add_argument("--fidelity-resolution", type=int, default=None,
                        help="pixels of the fidelity check (default: 512 at full size, 64 at tiny)")
    parser.add_argument("--fsdp", type=int, default=None, metavar="N",
                        help="also train each recipe in N processes under DDP and FSDP (default: 2 where two GPUs "
                             "are visible, else none)")
    parser.add_argument("--keep-replicas", dest="drop_replicas", action="store_false",
                        help="keep each family's replica on disk (default: deleted once its steps ran)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("no CUDA device (use --size tiny --device cpu to rehearse the slot on a CPU)")
    gpus = torch.cuda.device_count() if args.device.startswith("cuda") else 0
    if args.fsdp is None:
        args.fsdp = 2 if gpus >= 2 else 0
    elif args.fsdp and args.device.startswith("cuda") and gpus < args.fsdp:
        parser.error(f"--fsdp {args.fsdp}: one process per GPU, but {gpus} GPU(s) are visible")
    if args.fidelity_resolution is None:
        args.fidelity_resolution = 512 if args.size == "full" else 64
    slot = run(args)
    if slot.failed:
        raise SystemExit(f"failed: {', '.join(slot.failed)}")


if __name__ == "__main__":
    main()
