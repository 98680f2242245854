"""Run the CPU benchmarks one after another (``make bench``), each printing its own figures.

The default run is benchmarked first and its tiny model reused by the stage benchmarks, so the
model is built once; the grouped-vs-per-stage SLURM benchmark runs when a cluster answers `sinfo`. The
reward benchmark and the SD1.5-size benchmarks are long; run them by hand (see docs/performance.md).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
MODEL = ROOT / "resources/models/tiny-sd15"


def run(script: str, *args: str) -> None:
    print(f"\n== {script} {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, str(BENCH / script), *args], check=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if MODEL.is_dir():
            run("bench_default_run.py", "--model", str(MODEL))
            model = MODEL
        else:
            model = Path(tmp) / "tiny-sd15"
            run("bench_default_run.py", "--keep-model", str(model))
        run("bench_generate.py", "--model", str(model))
        run("bench_train_step.py", "--model", str(model))
        # the one-GPU slot rehearsed on tiny replicas on the CPU (its steady-state table included): the script
        # proven, its figures meaningless (bench/gpu_slot.py with no arguments on a GPU)
        run("gpu_slot.py", "--size", "tiny", "--device", "cpu", "--out", str(Path(tmp) / "gpu-slot"))
        run("bench_dag.py")
        if shutil.which("sinfo") and subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0:
            run("bench_slurm_groups.py", "--model", str(model))
        else:
            print("\n== bench_slurm_groups.py: skipped, no SLURM cluster answers `sinfo` (here: "
                  "SLURM_CI_COMMAND=\"python bench/bench_slurm_groups.py\" bash tests/slurm_ci.sh)", flush=True)


if __name__ == "__main__":
    main()
