"""`rewardloop score` run for real as a subprocess on rendered images."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rewardloop.models.tiny import synthetic
from rewardloop.artifacts import read_table

PROMPTS = [
    "a red circle on a blue background",
    "a green square on a yellow background",
    "a blue triangle on a red background",
]


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "rewardloop"
    return [str(script)] if script.exists() else [sys.executable, "-m", "rewardloop.cli"]


def _run(*args, cwd):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([*_cli(), "score", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture()
def folder(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for i, prompt in enumerate(PROMPTS):
        synthetic.render(*synthetic.parse_caption(prompt), size=64, rng=rng).save(images / f"{i:03d}.png")
    (tmp_path / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    return tmp_path


def test_score_folder_weighted_sum(folder):
    out = folder / "scores.parquet"
    proc = _run("--reward", "jpeg_incompressibility", "--reward", "color_match=0.5",
                "--images", folder / "images", "--prompts", folder / "prompts.txt",
                "--out", out, "--batch-size", 2, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    table = read_table(out).to_pandas()
    assert list(table.columns) == ["file", "prompt", "reward", "reward_jpeg_incompressibility",
                                   "reward_color_match", "reward_details"]
    assert list(table["file"]) == ["000.png", "001.png", "002.png"]
    assert list(table["prompt"]) == PROMPTS
    np.testing.assert_allclose(
        table["reward"], table["reward_jpeg_incompressibility"] + 0.5 * table["reward_color_match"]
    )
    assert np.all(table["reward_color_match"] == 2.0)  # correct renders score the maximum
    assert all(isinstance(json.loads(d), dict) for d in table["reward_details"])


def test_score_samples_parquet_keeps_sample_id(folder):
    import pyarrow as pa

    from rewardloop.artifacts import IMAGE_TYPE, encode_png, write_table
    from PIL import Image

    cells = [encode_png(Image.open(p).convert("RGB"), p.name) for p in sorted((folder / "images").iterdir())]
    samples = pa.table({"sample_id": ["s0", "s1", "s2"], "prompt": PROMPTS,
                        "image": pa.array(cells, type=IMAGE_TYPE)})
    write_table(samples, folder / "samples.parquet")
    out = folder / "scores.parquet"
    proc = _run("--reward", "color_match", "--images", folder / "samples.parquet", "--out", out, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    table = read_table(out).to_pandas()
    assert list(table["sample_id"]) == ["s0", "s1", "s2"]
    assert list(table.columns[:3]) == ["sample_id", "file", "prompt"]
    np.testing.assert_allclose(table["reward"], table["reward_color_match"])


def test_score_errors(folder):
    out = folder / "scores.parquet"
    (folder / "two.txt").write_text("a\nb\n")
    proc = _run("--reward", "color_match", "--images", folder / "images", "--prompts", folder / "two.txt",
                "--out", out, cwd=folder)
    assert proc.returncode == 1 and "has 2 prompt line(s)" in proc.stderr and "3 image file(s)" in proc.stderr
    (folder / "images" / "003.png").write_bytes(b"not a png")
    (folder / "four.txt").write_text("\n".join(PROMPTS + [PROMPTS[0]]) + "\n")
    proc = _run("--reward", "color_match", "--images", folder / "images", "--prompts", folder / "four.txt",
                "--out", out, cwd=folder)
    assert proc.returncode == 1 and "003.png" in proc.stderr and "does not decode" in proc.stderr
    proc = _run("--reward", "pickscore", "--reward-option", f"pickscore.model_path={folder / 'nope'}",
                "--images", folder / "images", "--out", out, cwd=folder)
    assert proc.returncode == 1 and "rewards.pickscore.model_path" in proc.stderr
    assert not out.exists()


def test_parse_rewards_options():
    from rewardloop.cli.score import parse_rewards

    cfg = parse_rewards(["ocr=2", "color_match"], ["ocr.backend=rapidocr", "color_match.max_distance=60"])
    assert cfg == {"ocr": {"weight": 2.0, "backend": "rapidocr"},
                   "color_match": {"weight": 1.0, "max_distance": 60}}
    with pytest.raises(ValueError, match="not among the --reward"):
        parse_rewards(["ocr"], ["pickscore.model_path=x"])
    with pytest.raises(ValueError, match="not a number"):
        parse_rewards(["ocr=heavy"], [])
