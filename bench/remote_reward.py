"""Remote vs in-process scoring throughput of the same reward (issue 31 §6).

Starts `rewardloop serve-reward` (rewardloop.cli.serve_reward) on a free 127.0.0.1 port, then scores the
same rendered images in-process (RewardSet with the reward itself) and through the server (RewardSet
with a `remote:` entry), in batches of 1, 8 and 32 (one request per batch). Prints images/s of each,
their ratio (remote / in-process) and the server's overhead per request (the extra seconds a batch
takes remote: PNG encoding and decoding, JSON, HTTP, the batcher's hand-off). Best of --repeat.
Usage: python bench/remote_reward.py [--reward color_match] [--images 256] [--size 128] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time

import numpy as np
import requests

from rewardloop.models.tiny.synthetic import render
from rewardloop.rewards.combine import RewardSet
from rewardloop.shape_domain import caption

BATCH_SIZES = (1, 8, 32)


@contextlib.contextmanager
def served(reward: str, batch_size: int):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "rewardloop.cli", "serve-reward", "--reward", reward,
                                "--batch-size", str(batch_size), "--port", str(port), "--log-level", "warning"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                requests.get(url + "/health", timeout=2)
                break
            except requests.ConnectionError:
                if process.poll() is not None:
                    raise SystemExit(f"the server exited with {process.returncode}")
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def best_seconds(reward_set: RewardSet, images, prompts, batch_size: int, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        reward_set.score(images, prompts, batch_size=batch_size)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reward", default="color_match")
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--size", type=int, default=128, help="image side in pixels")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    images = [render("circle", "red", "blue", size=args.size, rng=rng) for _ in range(args.images)]
    prompts = [caption("circle", "red", "blue")] * args.images
    local = RewardSet({args.reward: 1.0})
    os.environ.setdefault("TQDM_DISABLE", "1")
    print(f"{args.reward}, {args.images} images of {args.size}x{args.size}, best of {args.repeat}")
    print(f"{'batch':>5} {'in-process img/s':>17} {'remote img/s':>13} {'ratio':>6} {'overhead ms/request':>20}")
    with served(args.reward, max(BATCH_SIZES)) as url:
        remote = RewardSet({args.reward: {"weight": 1.0, "remote": {"url": url}}})
        remote.score(images[:1], prompts[:1])  # the health check and a first connection, outside the timing
        for batch_size in BATCH_SIZES:
            in_process = best_seconds(local, images, prompts, batch_size, args.repeat)
            over_http = best_seconds(remote, images, prompts, batch_size, args.repeat)
            requests_made = -(-args.images // batch_size)
            print(f"{batch_size:>5} {args.images / in_process:>17.1f} {args.images / over_http:>13.1f} "
                  f"{in_process / over_http:>6.2f} {1000 * (over_http - in_process) / requests_made:>20.2f}")


if __name__ == "__main__":
    main()
