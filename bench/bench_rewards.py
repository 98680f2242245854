"""Images/s of each reward on CPU at 512x512 (``score()`` of one batch, model loading excluded).

The model-based rewards run their real architectures, built from configs with random weights
(compute does not depend on the weights; no checkpoint is needed): PickScore on a transformers
CLIP ViT-H-14, HPS v2 on the open_clip ViT-H-14, aesthetic and clip_score on a transformers CLIP
ViT-L/14. OCR is timed for each backend that is importable here.

Usage: python bench/bench_rewards.py [--images 4] [--threads 1] [--only pickscore,hpsv2,...]
       [--paddle-det DIR --paddle-rec DIR]   (paddleocr model folders with inference.yml; the
       paddleocr env has no torch, run there with --only ocr:paddleocr)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw, ImageFont  # noqa: E402

RESOLUTION = 512
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")

VIT_H_14 = dict(  # laion/CLIP-ViT-H-14-laion2B-s32B-b79K == PickScore_v1's architecture
    text_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                     num_attention_heads=16, max_position_embeddings=77, hidden_act="gelu"),
    vision_config=dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32,
                       num_attention_heads=16, image_size=224, patch_size=14, hidden_act="gelu"),
    projection_dim=1024,
)
VIT_L_14 = dict(  # openai/clip-vit-large-patch14
    text_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                     num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu"),
    vision_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                       num_attention_heads=16, image_size=224, patch_size=14, hidden_act="quick_gelu"),
    projection_dim=768,
)


def _images(n: int, with_text: bool) -> tuple[list, list[str]]:
    rng = np.random.default_rng(0)
    images, prompts = [], []
    for i in range(n):
        array = rng.integers(0, 256, (RESOLUTION, RESOLUTION, 3), dtype=np.uint8)
        image = Image.fromarray(array // 4 + 160)
        text = f"OPEN {i} DAYS"
        if with_text:
            ImageDraw.Draw(image).text((40, 220), text, fill="black", font=ImageFont.truetype(str(FONT), 56))
        images.append(image)
        prompts.append(f'a red circle on a blue background with a sign saying "{text}"')
    return images, prompts


def _clip_embedder(arch: dict, tmp: Path):
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    from rewardloop.rewards.clip_common import ClipEmbedder
    from rewardloop.models.tiny.clip_tokenizer import build_tokenizer

    tokenizer = build_tokenizer(tmp / "tok", max_length=77)
    config = CLIPConfig(**{**arch, "text_config": {**arch["text_config"], "vocab_size": 49408}})
    model = CLIPModel(config)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224})
    return ClipEmbedder(model, CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer))


PADDLE_DIRS: dict = {}


def build(name: str, tmp: Path):
    """``(reward, description)`` with the real architecture and random weights."""
    from rewardloop.rewards import build_reward

    if name == "pickscore":
        from rewardloop.rewards.pickscore import PickScore

        return PickScore.from_embedder(_clip_embedder(VIT_H_14, tmp)), "transformers CLIP ViT-H-14"
    if name == "clip_score":
        from rewardloop.rewards.clip_score import ClipScore

        return ClipScore.from_embedder(_clip_embedder(VIT_L_14, tmp)), "transformers CLIP ViT-L/14"
    if name == "aesthetic":
        from rewardloop.rewards.aesthetic import Aesthetic, build_mlp

        return Aesthetic.from_parts(_clip_embedder(VIT_L_14, tmp), build_mlp(768)), "CLIP ViT-L/14 + MLP"
    if name == "hpsv2":
        import open_clip

        from rewardloop.rewards.hpsv2 import HPSv2

        model, _, preprocess = open_clip.create_model_and_transforms("ViT-H-14", pretrained=None)
        return HPSv2.from_model(model, preprocess, open_clip.get_tokenizer("ViT-H-14")), "open_clip ViT-H-14"
    if name == "ocr:paddleocr":
        return build_reward("ocr", backend="paddleocr", **PADDLE_DIRS), "PP-OCRv4 (paddle)"
    if name.startswith("ocr:"):
        return build_reward("ocr", backend=name.split(":", 1)[1]), "PP-OCR (onnxruntime)"
    return build_reward(name), "no model"


def candidates() -> list[str]:
    names = ["jpeg_incompressibility", "color_match"]
    for backend in ("rapidocr", "paddleocr"):
        try:
            __import__(backend)
        except ImportError:
            continue
        names.append(f"ocr:{backend}")  # paddleocr needs --paddle-det/--paddle-rec
    return names + ["aesthetic", "clip_score", "pickscore", "hpsv2"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=4, help="images per timed batch")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--only", default="", help="comma-separated subset of rewards")
    parser.add_argument("--paddle-det", help="paddleocr text detection model folder")
    parser.add_argument("--paddle-rec", help="paddleocr text recognition model folder")
    args = parser.parse_args()
    if args.paddle_det or args.paddle_rec:
        PADDLE_DIRS.update(text_detection_model_dir=args.paddle_det, text_recognition_model_dir=args.paddle_rec)
    try:
        import torch
    except ImportError:  # the paddleocr environment
        pass
    else:
        torch.set_num_threads(args.threads)
    names = [n for n in candidates() if not args.only or n in args.only.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            started = time.perf_counter()
            try:
                reward, what = build(name, Path(tmp))
            except Exception as exc:  # e.g. paddleocr without model folders
                rows.append((name, "-", f"skipped: {exc}"[:60], float("nan"), float("nan")))
                continue
            build_s = time.perf_counter() - started
            images, prompts = _images(args.images, with_text=name.startswith("ocr"))
            if name == "color_match":
                prompts = ["a red circle on a blue background"] * len(images)
            reward.score(images[:1], prompts[:1])  # warm-up
            started = time.perf_counter()
            scores, _ = reward.score(images, prompts)
            seconds = time.perf_counter() - started
            assert np.all(np.isfinite(scores)), name
            rows.append((name, what, f"{build_s:.1f}", len(images) / seconds, seconds / len(images)))
            del reward
            print(f"  {name}: {len(images) / seconds:.3g} images/s", flush=True)
    print(f"\nCPU, {args.threads} torch thread(s), {RESOLUTION}x{RESOLUTION} images, batch of {args.images}, "
          f"random weights for the model-based rewards\n")
    print(f"| {'reward':<24} | {'model':<28} | build s | images/s | s/image |")
    print(f"|{'-' * 26}|{'-' * 30}|---------|----------|---------|")
    for name, what, build_s, ips, spi in rows:
        print(f"| {name:<24} | {what:<28} | {build_s:>7} | {ips:>8.3g} | {spi:>7.3g} |")


if __name__ == "__main__":
    main()
