"""What pinning the CPU kernels (config ``cpu_kernels``, host/cpu_kernels.py: AVX2, MKL's COMPATIBLE
branch) costs, and what it buys: short tiny-model builds, each in a fresh process, pinned and native in turn.

Prints each build's seconds and torch's kernel level, the median pinned/native ratio, and whether the
pinned builds equal a simulated AVX2-only CPU's bytes (and the native ones differ, on a CPU with more
than AVX2). The default run's figures (build and iterations, pinned and native) are in
docs/reliability.md#the-same-bytes-on-every-x86-64-cpu.
Usage: python bench/bench_cpu_kernels.py [--repeats 3] [--unet-steps 60] [--vae-steps 40] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rewardloop.host import cpu_kernels


def build(out: Path, env: dict, args) -> dict:
    command = [sys.executable, str(Path(__file__).with_name("kernel_probe.py")), str(out), "--threads", str(args.threads),
               "--unet-steps", str(args.unet_steps), "--vae-steps", str(args.vae_steps)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--unet-steps", type=int, default=60)
    parser.add_argument("--vae-steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    kinds = {"native": cpu_kernels.probe_environment(pinned=False),
             "pinned": cpu_kernels.probe_environment(pinned=True)}
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    digests = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):  # interleaved: a noisy neighbour slows both alike
            for kind, env in kinds.items():
                got = build(Path(tmp) / f"{kind}{repeat}", env, args)
                seconds[kind].append(got["seconds"])
                digests.setdefault(kind, got["sha256"])
                print(f"{kind:7s} {got['capability']:7s} build {got['seconds']:6.1f} s", flush=True)
        avx2_cpu = build(Path(tmp) / "avx2_cpu", cpu_kernels.probe_environment(pinned=True, avx2_only_cpu=True), args)
    ratio = statistics.median(seconds["pinned"]) / statistics.median(seconds["native"])
    print(f"pinned / native build time (medians of {args.repeats}): {ratio:.3f}")
    print(f"pinned bytes equal a simulated AVX2-only CPU's: {digests['pinned'] == avx2_cpu['sha256']}")
    print(f"native bytes equal the pinned ones: {digests['native'] == digests['pinned']}")


if __name__ == "__main__":
    main()
