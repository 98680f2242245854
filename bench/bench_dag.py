"""DAG build time of the whole run for many iterations: `snakemake -n` (dry run, no job runs).

A 1000-iteration run is a chain of ~12 jobs per iteration, each iteration's generate waiting on the
previous export; Snakemake must plan it without hitting Python's recursion limit. Prints wall time
and planned jobs per iteration count, and the time per iteration.
Usage: python bench/bench_dag.py [--iterations 100 1000] [--shards 1]
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


def dry_run(iterations: int, shards: int) -> tuple[float, int]:
    """(seconds, planned jobs) of `snakemake -n` for the default config with ``iterations``."""
    with tempfile.TemporaryDirectory() as work:
        overlay = {
            "iterations": iterations,
            "prompts": {"train": str(ROOT / "resources/prompts/train.txt"),
                        "eval": str(ROOT / "resources/prompts/eval.txt")},
            "generate": {"shards": shards},
            "score": {"shards": shards},
        }
        (Path(work) / "bench.yaml").write_text(yaml.safe_dump(overlay))
        cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", work, "--configfile",
               str(Path(work) / "bench.yaml"), "-n", "--cores", "1"]
        started = time.perf_counter()
        result = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    output = result.stdout + result.stderr
    if result.returncode != 0 or "RecursionError" in output:
        raise SystemExit(f"snakemake -n with {iterations} iterations failed:\n{output[-3000:]}")
    total = re.search(r"^total\s+(\d+)", output, re.MULTILINE)
    return seconds, int(total.group(1)) if total else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--shards", type=int, default=1, help="generate.shards and score.shards")
    args = parser.parse_args()
    print(f"{'iterations':>10} {'jobs':>7} {'dry run s':>10} {'ms/iteration':>13}")
    for iterations in args.iterations:
        seconds, jobs = dry_run(iterations, args.shards)
        print(f"{iterations:>10} {jobs:>7} {seconds:>10.1f} {1000 * seconds / iterations:>13.1f}", flush=True)


if __name__ == "__main__":
    main()
