"""Wall time of the default run: building + pretraining the tiny model, then the 3 iterations.

Runs the real `snakemake --cores 2` on config.yaml in a scratch folder (nothing shared with
./results) and reads every job's Snakemake benchmark file and stage metrics. Prints:
- the tiny model build (goal <= 5 min on 2 cores),
- the 3 iterations after it (goal <= 4 min),
- the share of the iterations' job time spent outside stage compute (process start, imports,
  model loading, file I/O; goal <= 30 %), and of their wall time with no job computing.
With --also-cold it then runs the 3 iterations again on the same model with `warm_start: false`
(every job imports torch & co itself) and prints the ratios of the two in this one run.
Usage: python bench/bench_default_run.py [--model DIR] [--keep DIR] [--keep-model DIR] [--also-cold]
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
from dataclasses import dataclass
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


@dataclass
class LoopFigures:
    """The 3 iterations (with their evals) of one run."""

    wall: float  # seconds from after the build to the end of the run
    job_time: float  # summed Snakemake benchmark seconds of their jobs
    compute: float  # summed stage compute inside those jobs
    computing: float  # seconds of the wall time during which at least one job computes
    evals: list[float]

    def report(self, label: str) -> None:
        print(f"3 iterations (+ evals): {self.wall:7.1f} s wall (goal <= 240 s){label}")
        print(f"  sum of job times    : {self.job_time:7.1f} s, of which stage compute {self.compute:.1f} s")
        print(f"  outside compute     : {1 - self.compute / self.job_time:7.1%} of job time (goal <= 30 %)")
        print(f"  no job computing    : {1 - self.computing / self.wall:7.1%} of the iterations' wall time "
              f"({self.wall - self.computing:.1f} of {self.wall:.1f} s; eval runs beside the loop)")
        print("eval/reward/mean      : " + "  ".join(f"{v:.4f}" for v in self.evals) + "  (base, iter 0, 1, 2)")


def run_workflow(work: Path, overlay: dict) -> tuple[float, float, float]:
    """Run snakemake on config.yaml + ``overlay`` in ``work``: (seconds, start, end Unix time)."""
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    (work / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    started, wall_start = time.perf_counter(), time.time()
    subprocess.run([snakemake, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile",
                    str(work / "overlay.yaml"), "--cores", "2", "--quiet"], check=True)
    return time.perf_counter() - started, wall_start, time.time()


def loop_figures(results: Path, total: float, wall_start: float, wall_end: float, build: float) -> LoopFigures:
    job_time = job_seconds(results, "iter_*/*.tsv") + job_seconds(results, "base/*.tsv")
    # The iterations' wall window: after the build (its job time) to the end of the run.
    computing = covered_seconds(compute_spans(results), wall_start + build, wall_end)
    evals = [json.loads((results / p / "metrics/eval.json").read_text())["eval/reward/mean"]
             for p in ["base"] + sorted(d.name for d in results.glob("iter_*"))]
    return LoopFigures(total - build, job_time, compute_seconds(results), computing, evals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", help="reuse this built tiny model instead of building one")
    parser.add_argument("--keep", help="copy the run's results/ folder here (for figures)")
    parser.add_argument("--keep-model", help="copy the built tiny model here (for other benchmarks)")
    parser.add_argument("--also-cold", action="store_true",
                        help="then run the iterations again with warm_start: false and compare")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "warm"
        work.mkdir()
        prompts = {"train": str(ROOT / "resources/prompts/train.txt"), "eval": str(ROOT / "resources/prompts/eval.txt")}
        model = args.model or str(work / "tiny-sd15")
        overlay = {"prompts": prompts, "model": {"path": model, "build_tiny": not args.model}}
        total, wall_start, wall_end = run_workflow(work, overlay)
        results = work / "results"
        build = job_seconds(results, "build_tiny_model.tsv")
        warm = loop_figures(results, total, wall_start, wall_end, build)
        if args.keep:
            shutil.copytree(results, args.keep, dirs_exist_ok=True)
        if args.keep_model and not args.model:
            shutil.copytree(work / "tiny-sd15", args.keep_model, dirs_exist_ok=True)
        cold = None
        if args.also_cold:
            cold_work = Path(tmp) / "cold"
            cold_work.mkdir()
            cold_overlay = {**overlay, "model": {"path": model, "build_tiny": False}, "warm_start": False}
            cold = loop_figures(cold_work / "results", *run_workflow(cold_work, cold_overlay), build=0.0)
    if args.model:
        print(f"tiny model build      : reused {args.model} (run without --model to time the build)")
    else:
        print(f"tiny model build      : {build:7.1f} s (goal <= 300 s)")
    warm.report("  [warm_start: true, the default]")
    if cold:
        cold.report("  [warm_start: false]")
        print(f"warm vs cold          : wall {cold.wall / warm.wall:.2f}x faster, job time "
              f"{cold.job_time / warm.job_time:.2f}x less, eval identical: {cold.evals == warm.evals}")


if __name__ == "__main__":
    main()
