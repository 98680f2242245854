"""Which CPU kernels a process computes with, seen in the bytes: build a short tiny model in this
process and print torch's kernel level, the build's seconds and the sha256 of every weights file.
tests/unit/runtime/test_cpu_kernels.py and bench/bench_cpu_kernels.py run it in processes with the
environments of runtime/cpu_kernels.probe_environment (pinned or not, an AVX2-only CPU simulated)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from rewardloop.runtime import cpu_kernels


def probe(out: Path, threads: int, unet_steps: int, vae_steps: int) -> dict:
    """Build a short tiny model at ``out`` in this process: the kernel level torch dispatched to, the
    build's seconds and the sha256 of every weights file."""
    import torch

    from rewardloop.models.tiny_sd15 import build_tiny_sd15

    start = time.perf_counter()
    build_tiny_sd15(out, seed=0, vae_steps=vae_steps, unet_steps=unet_steps, num_threads=threads, progress=False)
    seconds = time.perf_counter() - start
    digests = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted(out.rglob("*.safetensors"))}
    return {"capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
            "seconds": seconds, "sha256": digests, "variables": {k: os.environ.get(k) for k in cpu_kernels.PINNED}}


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m rewardloop.models.kernel_probe",
                                     description="build a short tiny model, print its kernel level and digests")
    parser.add_argument("out", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--unet-steps", type=int, default=60)
    parser.add_argument("--vae-steps", type=int, default=40)
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.out, args.threads, args.unet_steps, args.vae_steps)), flush=True)


if __name__ == "__main__":
    main()
