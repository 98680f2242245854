"""Run the CPU benchmarks one after another (``make bench``), each printing its own figures.

The default run is benchmarked first and its tiny model reused by the stage benchmarks, so the
model is built once. The reward benchmark and the SD1.5-size benchmarks are long; run them by hand
(see docs/performance.md).
"""

from __future__ import annotations

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
        run("bench_dag.py")


if __name__ == "__main__":
    main()
