import io

import numpy as np
import pytest
from PIL import Image

from rewardloop.rewards import build_reward


def _noise(seed=0, size=64):
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def test_flat_image_is_more_compressible_than_noise():
    flat = Image.new("RGB", (64, 64), (120, 30, 200))
    reward = build_reward("jpeg_compressibility")
    scores, details = reward.score([flat, _noise()], ["a", "b"])
    assert scores[0] > scores[1]
    assert details == [{}, {}]
    incompressibility, _ = build_reward("jpeg_incompressibility").score(
        [flat, _noise()], ["a", "b"]
    )
    assert incompressibility[0] < incompressibility[1]
    np.testing.assert_allclose(incompressibility, -scores)


def test_size_matches_independent_jpeg_encoding():
    image = _noise(seed=1, size=48)
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=95)
    expected_kb = len(buf.getvalue()) / 1000
    scores, _ = build_reward("jpeg_incompressibility").score([image], ["x"])
    assert scores[0] == pytest.approx(expected_kb)


def test_options_are_rejected():
    with pytest.raises(ValueError, match="jpeg_compressibility"):
        build_reward("jpeg_compressibility", quality=50)
