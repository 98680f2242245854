"""What the content fingerprint of a model folder costs at every snakemake start, against hashing it all.

Builds (once) a ``--size full`` SD1.5 replica (8.2 GB with its fp16 variants) unless ``--model``
names a folder, then times rewardloop.fingerprint.fingerprint in a fresh process (no stat cache) and a
sha256 of every byte, and prints the bytes each reads and the ratio.
Usage: python bench/bench_fingerprint.py [--model DIR] [--out /tmp/rewardloop-bench-sd15-full]
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
from pathlib import Path


def full_sha256(folder: Path) -> tuple[float, int]:
    started, total = time.perf_counter(), 0
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with open(file, "rb") as handle:
            while chunk := handle.read(1 << 24):
                digest.update(chunk)
                total += len(chunk)
    return time.perf_counter() - started, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--out", type=Path, default=Path("/tmp/rewardloop-bench-sd15-full"))
    args = parser.parse_args()
    folder = args.model
    if folder is None:
        folder = args.out
        if not (folder / "model_index.json").is_file():
            from rewardloop.models.replicas import build_replica

            build_replica("sd15", folder, size="full")
    code = ("import time, sys; from rewardloop.fingerprint import fingerprint; t = time.perf_counter(); "
            "f = fingerprint(sys.argv[1]); print(f, time.perf_counter() - t)")
    runs = [subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, check=True)
            .stdout.split() for _ in range(3)]
    fingerprints = {r[0] for r in runs}
    seconds = min(float(r[1]) for r in runs)
    hashed_s, total = full_sha256(folder)
    files = sum(1 for p in folder.rglob("*") if p.is_file())
    print(f"{folder}: {files} files, {total / 1e9:.2f} GB")
    print(f"fingerprint {seconds:.3f} s (best of 3 fresh processes; identical: {len(fingerprints) == 1}); "
          f"sha256 of every byte {hashed_s:.1f} s ({total / hashed_s / 1e9:.2f} GB/s): ratio {hashed_s / seconds:.0f}x")


if __name__ == "__main__":
    main()
