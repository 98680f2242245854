"""One cluster job per stage vs one per iteration (`resources.group`), on a real SLURM cluster.

Runs the same small config through `--profile profiles/slurm` twice in one session, once with
`resources.group: stage` and once with `resources.group: iteration` (order alternated with
--repeat), each in a scratch folder, and prints per mode:
- SLURM jobs submitted, and per iteration;
- wall seconds of the whole run and per iteration (the run's wall / iterations: the base eval and the
  report are in both);
- the share of the wall time with no stage computing (no rollout, scoring, training or eval block of
  any job running: queue waits, job starts, imports, model loads, file I/O, the submitting host's steps);
and the ratios of the two.
Needs a cluster: here `SLURM_CI_COMMAND="python bench/bench_slurm_groups.py" bash tests/slurm_ci.sh`
starts the one-node test cluster (4 stand-in GPUs, the jobs run on the CPU) around it; elsewhere pass
--partition (and --account) of yours.
Usage: python bench/bench_slurm_groups.py [--iterations 3] [--repeat 1] [--model DIR] [--partition P]
       [--account A]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_default_run import compute_spans, covered_seconds  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
MODES = ("stage", "iteration")


def overlay(model: str, iterations: int, mode: str) -> dict:
    """The SLURM tier's config (tests/workflow/test_slurm.py) for ``iterations``, unsharded."""
    return {
        "iterations": iterations, "model": {"path": model, "build_tiny": False}, "tracking": {"enabled": False},
        "prompts": {"train": str(ROOT / "resources/prompts/train.txt"), "eval": str(ROOT / "resources/prompts/eval.txt")},
        "generate": {"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 2, "batch_size": 4},
        "score": {"batch_size": 4}, "train": {"steps": 2, "batch_size": 2}, "eval": {"seeds": [0], "steps": 2},
        "resources": {"threads": 1, "mem_mb": 1500, "runtime": 10, "group": mode},
    }


def run(work: Path, config: dict, partition: str | None, account: str | None) -> tuple[float, float, float, int]:
    """(seconds, start, end Unix time, SLURM jobs submitted) of one run through the profile."""
    (work / "bench.yaml").write_text(yaml.safe_dump(config))
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile", str(work / "bench.yaml"),
           "--profile", str(ROOT / "profiles/slurm"), "--slurm-status-command", "squeue",
           "--slurm-init-seconds-before-status-checks", "2", "--latency-wait", "5"]
    cmd += ["--slurm-account", account] if account else ["--slurm-no-account"]
    if partition:
        cmd += ["--default-resources", f"slurm_partition={partition}"]
    started, wall_start = time.perf_counter(), time.time()
    result = subprocess.run(cmd, capture_output=True, text=True)
    seconds, wall_end = time.perf_counter() - started, time.time()
    if result.returncode != 0:
        raise SystemExit(f"snakemake failed in {work}:\n{result.stderr[-4000:]}")
    submitted = len(re.findall(r"has been submitted with SLURM jobid", result.stderr))
    return seconds, wall_start, wall_end, submitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode, alternating the order")
    parser.add_argument("--model", help="a built tiny model (default: build one, seconds)")
    parser.add_argument("--partition")
    parser.add_argument("--account")
    args = parser.parse_args()
    if shutil.which("sinfo") is None or subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        raise SystemExit("no SLURM cluster answers `sinfo`: run it inside tests/slurm_ci.sh (see --help)")
    figures: dict[str, list[tuple[float, float, int]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="rewardloop-bench-slurm-") as tmp:
        model = args.model
        if model is None:
            from rewardloop.models.tiny.sd15 import build_tiny_sd15

            model = str(Path(tmp) / "tiny-sd15")
            build_tiny_sd15(Path(model), seed=0, vae_steps=40, unet_steps=60, num_threads=1, progress=False)
        for round_ in range(args.repeat):
            for mode in (MODES if round_ % 2 == 0 else MODES[::-1]):
                work = Path(tmp) / f"{mode}-{round_}"
                work.mkdir()
                seconds, start, end, jobs = run(work, overlay(model, args.iterations, mode), args.partition,
                                                args.account)
                idle = 1 - covered_seconds(compute_spans(work / "results"), start, end) / (end - start)
                figures[mode].append((seconds, idle, jobs))
                print(f"{mode:9s} run {round_}: {seconds:6.1f} s, {jobs} SLURM jobs, no stage computing {idle:.1%}",
                      flush=True)
    n = args.iterations
    print(f"\n{n} iterations, best of {args.repeat} per mode (wall / iterations includes the base eval and report)")
    best = {mode: min(runs) for mode, runs in figures.items()}
    for mode in MODES:
        seconds, idle, jobs = best[mode]
        print(f"  resources.group: {mode:9s}  {jobs:3d} SLURM jobs ({jobs / n:.1f} per iteration)  "
              f"{seconds:6.1f} s  {seconds / n:6.1f} s per iteration  no stage computing {idle:.1%}")
    stage, grouped = best["stage"], best["iteration"]
    print(f"  iteration vs stage: wall x{grouped[0] / stage[0]:.2f}, SLURM jobs x{grouped[2] / stage[2]:.2f}, "
          f"idle share {grouped[1]:.1%} vs {stage[1]:.1%}")


if __name__ == "__main__":
    main()
