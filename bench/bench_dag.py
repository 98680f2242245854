"""Planning time: `snakemake -n` (dry run, no job runs) of long runs, against the goal of issue 33.

Two plans, each timed in a fresh scratch folder (no results/, so every job is planned to run):
- the default config (config.yaml) for 1000 iterations: a chain of 8 jobs per iteration, each
  iteration's generate waiting on the previous export; goal < 10 s on 2 cores;
- an experiments fan-out (configs/tiny_sd3_compare.yaml: 7 variants x 3 seeds, one DAG) for 100
  iterations.
Prints, per plan, the planned jobs, the wall seconds (best of --repeat), and ms per iteration and per
job; and the startup alone (the same command for 1 iteration), which every plan pays.
Usage: python bench/bench_dag.py [--iterations 1000] [--fanout-iterations 100] [--repeat 1]
       [--shards 1] [--skip-fanout]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
FANOUT = "configs/tiny_sd3_compare.yaml"
GOAL_S = 10.0  # issue 33: 1000 iterations of the default config planned in < 10 s on 2 cores


def dry_run(iterations: int, shards: int = 1, configfile: str | None = None) -> tuple[float, int]:
    """(seconds, planned jobs) of `snakemake -n` with ``iterations`` (the default config, or ``configfile`` over it)."""
    with tempfile.TemporaryDirectory() as work:
        overlay = {
            "iterations": iterations,
            "prompts": {"train": str(ROOT / "resources/prompts/train.txt"),
                        "eval": str(ROOT / "resources/prompts/eval.txt")},
        }
        if shards != 1:
            overlay |= {"generate": {"shards": shards}, "score": {"shards": shards}}
        (Path(work) / "bench.yaml").write_text(yaml.safe_dump(overlay))
        configfiles = ([str(ROOT / configfile)] if configfile else []) + [str(Path(work) / "bench.yaml")]
        cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", work, "--configfile", *configfiles,
               "-n", "--cores", "1"]
        started = time.perf_counter()
        result = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    output = result.stdout + result.stderr
    if result.returncode != 0 or "RecursionError" in output:
        raise SystemExit(f"snakemake -n with {iterations} iterations failed:\n{output[-3000:]}")
    total = re.search(r"^total\s+(\d+)", output, re.MULTILINE)
    return seconds, int(total.group(1)) if total else -1


def best_of(repeat: int, *args, **kwargs) -> tuple[float, int]:
    runs = [dry_run(*args, **kwargs) for _ in range(repeat)]
    return min(seconds for seconds, _ in runs), runs[0][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, nargs="+", default=[1000], help="of the default config")
    parser.add_argument("--fanout-iterations", type=int, default=100, help=f"of {FANOUT}")
    parser.add_argument("--skip-fanout", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="runs per plan; the best is printed (shared machines)")
    parser.add_argument("--shards", type=int, default=1, help="generate.shards and score.shards (default config)")
    args = parser.parse_args()

    plans = [("default", iterations, None) for iterations in args.iterations]
    if not args.skip_fanout:
        plans.append(("7x3 fan-out", args.fanout_iterations, FANOUT))
    startup, _ = best_of(args.repeat, 1, args.shards)
    print(f"startup (1 iteration of the default config): {startup:.1f} s")
    print(f"{'plan':>12} {'iterations':>10} {'jobs':>7} {'jobs/it':>8} {'dry run s':>10} {'ms/iteration':>13} "
          f"{'ms/job':>7}")
    results = {}
    for name, iterations, configfile in plans:
        seconds, jobs = best_of(args.repeat, iterations, args.shards if configfile is None else 1, configfile)
        results[(name, iterations)] = seconds
        print(f"{name:>12} {iterations:>10} {jobs:>7} {jobs / iterations:>8.1f} {seconds:>10.1f} "
              f"{1000 * seconds / iterations:>13.1f}"
              f" {1000 * seconds / max(jobs, 1):>7.2f}", flush=True)
    if ("default", 1000) in results:
        seconds = results[("default", 1000)]
        print(f"default, 1000 iterations: {seconds:.1f} s vs goal < {GOAL_S:.0f} s: ratio {seconds / GOAL_S:.2f}"
              f" ({'met' if seconds < GOAL_S else 'not met'})")


if __name__ == "__main__":
    main()
