"""Wall time of the default run: building + pretraining the tiny model, then the 3 iterations.

Runs the real `snakemake --cores 2` on config.yaml in a scratch folder (nothing shared with
./results) and reads every job's Snakemake benchmark file and stage metrics. Prints:
- the tiny model build (goal <= 5 min on 2 cores),
- the 3 iterations after it (goal <= 4 min),
- the share of the iterations' job time spent outside stage compute (process start, imports,
  model loading, file I/O; goal <= 30 %).
Usage: python bench/bench_default_run.py [--model DIR] [--keep DIR] [--keep-model DIR]
(--model reuses a built tiny model; --keep-model copies the one this run built)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from rewardloop.artifacts import benchmark_seconds

ROOT = Path(__file__).resolve().parents[1]
COMPUTE_KEYS = ("perf/rollout_time", "perf/score_time", "perf/train_time", "perf/eval_time")


def job_seconds(results: Path, pattern: str) -> float:
    return sum(benchmark_seconds(tsv) or 0.0 for tsv in results.glob(f"benchmarks/{pattern}"))


def compute_seconds(results: Path) -> float:
    total = 0.0
    for metrics in results.glob("iter_*/metrics/*.json"):
        data = json.loads(metrics.read_text())
        total += sum(data.get(key, 0.0) for key in COMPUTE_KEYS)
    return total


def compute_spans(results: Path) -> list[tuple[float, float]]:
    """[start, end] (Unix time) of every stage compute block of the run's jobs."""
    spans = []
    for metrics in results.glob("*/metrics/*.json"):
        recorded = json.loads(metrics.read_text()).get("perf/spans", {})
        spans += [tuple(recorded[key]) for key in COMPUTE_KEYS if key in recorded]
    return spans


def covered_seconds(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of [start, end] during which at least one span runs (their union, clipped)."""
    covered, reach = 0.0, start
    for a, b in sorted(spans):
        a, b = max(a, reach), min(b, end)
        if b > a:
            covered += b - a
            reach = b
    return covered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", help="reuse this built tiny model instead of building one")
    parser.add_argument("--keep", help="copy the run's results/ folder here (for figures)")
    parser.add_argument("--keep-model", help="copy the built tiny model here (for other benchmarks)")
    args = parser.parse_args()
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        overlay = {"prompts": {"train": str(ROOT / "resources/prompts/train.txt"),
                               "eval": str(ROOT / "resources/prompts/eval.txt")}}
        if args.model:
            overlay["model"] = {"path": args.model, "build_tiny": False}
        else:
            overlay["model"] = {"path": str(work / "tiny-sd15")}
        (work / "overlay.yaml").write_text(yaml.safe_dump(overlay))
        started = time.perf_counter()
        wall_start = time.time()
        subprocess.run([snakemake, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile",
                        str(work / "overlay.yaml"), "--cores", "2", "--quiet"], check=True)
        total = time.perf_counter() - started
        wall_end = time.time()
        results = work / "results"
        build = job_seconds(results, "build_tiny_model.tsv")
        iteration_jobs = job_seconds(results, "iter_*/*.tsv") + job_seconds(results, "base/*.tsv")
        compute = compute_seconds(results)
        # The iterations' wall window: after the build (its job time) to the end of the run.
        spans = compute_spans(results)
        window_start = wall_start + build
        computing = covered_seconds(spans, window_start, wall_end)
        evals = [json.loads((results / p / "metrics/eval.json").read_text())["eval/reward/mean"]
                 for p in ["base"] + sorted(d.name for d in results.glob("iter_*"))]
        if args.keep:
            shutil.copytree(results, args.keep, dirs_exist_ok=True)
        if args.keep_model and not args.model:
            shutil.copytree(work / "tiny-sd15", args.keep_model, dirs_exist_ok=True)
    loop = total - build
    if args.model:
        print(f"tiny model build      : reused {args.model} (run without --model to time the build)")
    else:
        print(f"tiny model build      : {build:7.1f} s (goal <= 300 s)")
    print(f"3 iterations (+ evals): {loop:7.1f} s wall (goal <= 240 s)")
    print(f"  sum of job times    : {iteration_jobs:7.1f} s, of which stage compute {compute:.1f} s")
    print(f"  outside compute     : {1 - compute / iteration_jobs:7.1%} of job time (goal <= 30 %)")
    print(f"  no job computing    : {1 - computing / loop:7.1%} of the iterations' wall time "
          f"({loop - computing:.1f} of {loop:.1f} s; eval runs beside the loop)")
    print("eval/reward/mean      : " + "  ".join(f"{v:.4f}" for v in evals) + "  (base, iter 0, 1, 2)")


if __name__ == "__main__":
    main()
