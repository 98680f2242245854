"""GPU check of the vlm_judge reward: a real VLM, served here by an OpenAI-compatible server, judges images.

Serves the first model of ``JUDGES`` found in the local hub cache (or ``--model``, a folder or cached hub
id) with ``vllm serve`` when vLLM is installed, else ``transformers serve`` (which needs the ``openai``
package), on 127.0.0.1 with a bearer key; nothing is downloaded. Without a cached model or a server it
says so and is skipped. It then scores rendered shapes under their own caption and under a wrong one,
with both built-in templates, and prints per template: the share of unparseable answers, the mean score
of right and wrong captions, images/s and one raw answer. It fails when every answer of a template is
unparseable (the template and the parse rule no longer fit the model) or the server does not come up.
tests/unit/rewards/test_vlm_judge.py covers the plumbing with a tiny random VLM on the CPU; this is the
real judge on a GPU. ``bench/gpu_smoke.py --vlm-judge`` runs it after the recipes.
Usage: python bench/vlm_judge_smoke.py [--out /tmp/rewardloop-vlm-judge] [--model DIR_OR_HUB_ID] [--device cuda]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import requests

# Judges worth checking, best first: UnifiedReward's (the unified_reward template's own model), then general
# instruction-following Qwen VLMs (rating_1_10's kind).
JUDGES = ("CodeGoat24/UnifiedReward-qwen-7b", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct",
          "Qwen/Qwen2-VL-2B-Instruct")
START_S = 900  # loading a 7B model and warming vLLM up
IMAGES = 8


def cached_model(model: str | None) -> str | None:
    """The local folder of ``model`` (a folder, or a hub id in the cache), else of the first cached judge."""
    from huggingface_hub import try_to_load_from_cache

    if model and Path(model).is_dir():
        return model
    for repo in [model] if model else JUDGES:
        found = try_to_load_from_cache(repo, "config.json")
        if isinstance(found, str):
            return str(Path(found).parent)
    return None


def server_command(folder: str, port: int, device: str) -> tuple[list[str], str] | None:
    """The command that serves ``folder`` on ``port`` and the model name it serves it under."""
    if shutil.which("vllm"):  # the key from VLLM_API_KEY
        return ["vllm", "serve", folder, "--served-model-name", "judge", "--host", "127.0.0.1", "--port", str(port),
                "--max-model-len", "8192"], "judge"
    transformers_cli = Path(sys.executable).with_name("transformers")
    if transformers_cli.exists() and importlib.util.find_spec("openai"):  # no key: the judge's goes unchecked
        return [str(transformers_cli), "serve", folder, "--host", "127.0.0.1", "--port", str(port),
                "--device", device], folder
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def shapes() -> tuple[list, list[str], list[str]]:
    """Rendered shapes at 512 px, their captions and wrong captions (other colours, another shape)."""
    from rewardloop.models.tiny.synthetic import render
    from rewardloop.shape_domain import COLORS, SHAPES, caption

    rng = np.random.default_rng(0)
    images, right, wrong = [], [], []
    for k in range(IMAGES):
        shape, fg, bg = SHAPES[k % len(SHAPES)], COLORS[k % len(COLORS)], COLORS[(k + 3) % len(COLORS)]
        images.append(render(shape, fg, bg, size=512, rng=rng))
        right.append(caption(shape, fg, bg))
        wrong.append(caption(SHAPES[(k + 1) % len(SHAPES)], bg, fg))
    return images, right, wrong


def vlm_judge_check(out: Path, device: str = "cuda", model: str | None = None) -> dict:
    from rewardloop.rewards import build_reward

    folder = cached_model(model)
    if folder is None:
        return {"check": "vlm_judge", "skipped": f"no judge in the local hub cache ({model or ', '.join(JUDGES)})"}
    port = free_port()
    served = server_command(folder, port, device)
    if served is None:
        return {"check": "vlm_judge", "skipped": "neither vllm nor transformers serve (needs the openai package)"}
    command, name = served
    out.mkdir(parents=True, exist_ok=True)
    key = secrets.token_hex(16)
    (out / "key").write_text(key)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_API_KEY": key}
    log = open(out / "server.log", "w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_S
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(command[:3])} did not come up: see {out / 'server.log'}")
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(2)
        images, right, wrong = shapes()
        row = {"check": "vlm_judge", "model": folder, "server": command[0]}
        for template in ("unified_reward", "rating_1_10"):
            judge = build_reward("vlm_judge", url=url, model=name, template=template, token_file=str(out / "key"),
                                 on_unparseable="nan", timeout=600, concurrency=IMAGES)
            started = time.perf_counter()
            scores, details = judge.score(images + images, right + wrong)
            seconds = time.perf_counter() - started
            unparseable = float(np.isnan(scores).mean())
            if unparseable == 1.0:
                raise AssertionError(f"vlm_judge, template {template}: every answer unparseable, e.g. "
                                     f"{details[0]['answer'][:300]!r}")
            row[template] = {"unparseable": unparseable, "right_mean": float(np.nanmean(scores[:IMAGES])),
                             "wrong_mean": float(np.nanmean(scores[IMAGES:])),
                             "images_per_s": 2 * IMAGES / seconds, "answer": details[0]["answer"][:300]}
        return row
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/rewardloop-vlm-judge"))
    parser.add_argument("--model", help="a model folder or a hub id in the local cache (default: the first of JUDGES)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    row = vlm_judge_check(args.out, args.device, args.model)
    print(json.dumps(row, indent=2))
    (args.out / "vlm_judge.json").parent.mkdir(parents=True, exist_ok=True)
    (args.out / "vlm_judge.json").write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
