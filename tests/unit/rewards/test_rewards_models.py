"""Model-based rewards (pickscore, clip_score, aesthetic, hpsv2) on tiny models of the real
architectures, saved in the real on-disk formats and loaded through the rewards' own code path."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import torch

from rewardloop.models.tiny import synthetic
from rewardloop.rewards import build_reward

torch.set_num_threads(1)

PROMPTS = [
    "a red circle on a blue background",
    "a green square on a yellow background",
    "a blue triangle on a red background",
    "a yellow circle on a green background",
]


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [synthetic.render(*synthetic.parse_caption(p), size=48, rng=rng) for p in PROMPTS]


# --- tiny transformers CLIP (PickScore / CLIP / aesthetic backbone) -------------------------------


@pytest.fixture(scope="module")
def clip_dirs(tmp_path_factory):
    """``(model_dir, processor_dir)``: a tiny CLIPModel and CLIPProcessor saved with save_pretrained."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    from rewardloop.models.tiny.clip_tokenizer import build_tokenizer

    root = tmp_path_factory.mktemp("clip")
    tokenizer = build_tokenizer(root / "tokenizer")
    special = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id)
    config = CLIPConfig(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2,
                         max_position_embeddings=tokenizer.model_max_length, **special),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=32, patch_size=8),
        projection_dim=16,
    )
    torch.manual_seed(0)
    model = CLIPModel(config).eval()
    model_dir, processor_dir = root / "model", root / "processor"
    model.save_pretrained(model_dir)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(processor_dir)
    return model_dir, processor_dir


def _reference_embeds(model_dir, processor_dir, images, prompts):
    """Normalised image/text embeddings computed directly with transformers (independent path)."""
    from transformers import CLIPModel, CLIPProcessor

    model = CLIPModel.from_pretrained(model_dir).eval()
    processor = CLIPProcessor.from_pretrained(processor_dir)
    with torch.no_grad():
        pixel = processor(images=images, return_tensors="pt")["pixel_values"]
        img = model.get_image_features(pixel_values=pixel)
        img = img if torch.is_tensor(img) else img.pooler_output
        text_in = processor(text=prompts, padding=True, return_tensors="pt")
        txt = model.get_text_features(input_ids=text_in["input_ids"], attention_mask=text_in["attention_mask"])
        txt = txt if torch.is_tensor(txt) else txt.pooler_output
    img = img / img.norm(dim=-1, keepdim=True)
    txt = txt / txt.norm(dim=-1, keepdim=True)
    return model, img, txt


def _assert_batch_invariant_and_deterministic(reward, images, prompts):
    together, details = reward.score(images, prompts)
    again, _ = reward.score(images, prompts)
    one_by_one = np.concatenate([reward.score([im], [p])[0] for im, p in zip(images, prompts)])
    assert together.shape == (len(images),) and len(details) == len(images)
    assert np.all(np.isfinite(together))
    np.testing.assert_array_equal(together, again)
    np.testing.assert_allclose(together, one_by_one, rtol=1e-5, atol=1e-5)
    return together


def test_pickscore_matches_reference_formula(clip_dirs, images):
    model_dir, processor_dir = clip_dirs
    reward = build_reward("pickscore", model_path=str(model_dir), processor_path=str(processor_dir))
    scores = _assert_batch_invariant_and_deterministic(reward, images, PROMPTS)
    model, img, txt = _reference_embeds(model_dir, processor_dir, images, PROMPTS)
    expected = (model.logit_scale.exp() * (img * txt).sum(-1)).detach().numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-5)
    # prompt matters: pairing each image with another prompt changes the scores
    shifted, _ = reward.score(images, PROMPTS[1:] + PROMPTS[:1])
    assert not np.allclose(shifted, scores)


def test_clip_score_is_100_times_clamped_cosine(clip_dirs, images):
    model_dir, processor_dir = clip_dirs
    reward = build_reward("clip_score", model_path=str(model_dir), processor_path=str(processor_dir))
    scores = _assert_batch_invariant_and_deterministic(reward, images, PROMPTS)
    _, img, txt = _reference_embeds(model_dir, processor_dir, images, PROMPTS)
    cosine = (img * txt).sum(-1).numpy()
    np.testing.assert_allclose(scores, 100 * np.maximum(cosine, 0), rtol=1e-5, atol=1e-4)
    assert np.all(scores >= 0)


def test_clip_missing_and_wrong_folders_are_named(clip_dirs, tmp_path):
    model_dir, _ = clip_dirs
    missing = tmp_path / "nope"
    with pytest.raises(ValueError, match=rf"rewards\.pickscore\.model_path.*{missing}"):
        build_reward("pickscore", model_path=str(missing))
    with pytest.raises(ValueError, match=r"rewards\.pickscore\.model_path.*required"):
        build_reward("pickscore")
    with pytest.raises(ValueError, match=rf"rewards\.pickscore\.processor_path.*{missing}"):
        build_reward("pickscore", model_path=str(model_dir), processor_path=str(missing))
    wrong = tmp_path / "bert"
    wrong.mkdir()
    (wrong / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(ValueError, match=rf"{wrong}.*'bert'.*expected a CLIP model"):
        build_reward("clip_score", model_path=str(wrong))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=rf"{empty} is not a transformers model folder"):
        build_reward("pickscore", model_path=str(empty))


# --- aesthetic ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def aesthetic_mlp(tmp_path_factory, clip_dirs):
    from rewardloop.rewards.aesthetic import build_mlp

    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("aesthetic") / "sac+logos+ava1-tiny-linearMSE.pth"
    state = build_mlp(16).state_dict()
    assert sorted({k.split(".")[1] for k in state}) == ["0", "2", "4", "6", "7"]  # published layout
    torch.save(state, path)
    return path


def test_aesthetic_matches_independent_mlp(clip_dirs, aesthetic_mlp, images):
    model_dir, processor_dir = clip_dirs
    reward = build_reward("aesthetic", clip_path=str(model_dir), mlp_path=str(aesthetic_mlp),
                          processor_path=str(processor_dir))
    scores = _assert_batch_invariant_and_deterministic(reward, images, PROMPTS)
    _, img, _ = _reference_embeds(model_dir, processor_dir, images, PROMPTS)
    state = torch.load(aesthetic_mlp, weights_only=True)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(16, 1024), torch.nn.Dropout(0.2), torch.nn.Linear(1024, 128),
        torch.nn.Dropout(0.2), torch.nn.Linear(128, 64), torch.nn.Dropout(0.1),
        torch.nn.Linear(64, 16), torch.nn.Linear(16, 1),
    ).eval()
    mlp.load_state_dict({k.removeprefix("layers."): v for k, v in state.items()})
    with torch.no_grad():
        expected = mlp(img).reshape(-1).numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)


def test_aesthetic_names_missing_paths(clip_dirs, aesthetic_mlp, tmp_path):
    """(A malicious pickle as mlp_path: tests/unit/test_security.py.)"""
    model_dir, _ = clip_dirs
    missing = tmp_path / "missing.pth"
    with pytest.raises(ValueError, match=rf"rewards\.aesthetic\.mlp_path.*{missing}"):
        build_reward("aesthetic", clip_path=str(model_dir), mlp_path=str(missing))
    with pytest.raises(ValueError, match=rf"rewards\.aesthetic\.clip_path.*{tmp_path / 'x'}"):
        build_reward("aesthetic", clip_path=str(tmp_path / "x"), mlp_path=str(aesthetic_mlp))


# --- HPS v2 on a tiny open_clip ViT ---------------------------------------------------------------

TINY_ARCH = "rewardloop-tiny-hps-vit"


@pytest.fixture(scope="module")
def hps_checkpoint(tmp_path_factory):
    """A tiny open_clip ViT registered as TINY_ARCH; its state dict saved like the HPS checkpoint."""
    import open_clip

    root = tmp_path_factory.mktemp("hps")
    cfg = {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 8},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
    }
    cfg_path = root / f"{TINY_ARCH}.json"
    cfg_path.write_text(json.dumps(cfg))
    open_clip.add_model_config(cfg_path)
    torch.manual_seed(2)
    model, _, _ = open_clip.create_model_and_transforms(TINY_ARCH, pretrained=None)
    path = root / "HPS_tiny_compressed.pt"
    torch.save({"state_dict": model.state_dict()}, path)
    return path, cfg_path


def test_hpsv2_matches_reference_code(hps_checkpoint, images):
    import open_clip

    path, _ = hps_checkpoint
    reward = build_reward("hpsv2", checkpoint_path=str(path), arch=TINY_ARCH)
    scores = _assert_batch_invariant_and_deterministic(reward, images, PROMPTS)
    # the HPSv2 reference: outputs = model(image, text); diag(image_features @ text_features.T)
    model, _, preprocess_val = open_clip.create_model_and_transforms(
        TINY_ARCH, pretrained=None, output_dict=True
    )
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True)["state_dict"])
    model.eval()
    tokenizer = open_clip.get_tokenizer(TINY_ARCH)
    with torch.no_grad():
        expected = []
        for image, prompt in zip(images, PROMPTS):
            out = model(preprocess_val(image).unsqueeze(0), tokenizer([prompt]))
            expected.append(torch.diagonal(out["image_features"] @ out["text_features"].T).item())
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)


def test_hpsv2_plain_and_ddp_state_dicts_and_config_file(hps_checkpoint, images, tmp_path):
    path, cfg_path = hps_checkpoint
    state = torch.load(path, weights_only=True)["state_dict"]
    plain, ddp = tmp_path / "plain.pt", tmp_path / "ddp.pt"
    torch.save(state, plain)
    torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}, "epoch": 3}, ddp)
    reference, _ = build_reward("hpsv2", checkpoint_path=str(path), arch=TINY_ARCH).score(images, PROMPTS)
    for ckpt, arch in ((plain, TINY_ARCH), (ddp, str(cfg_path))):
        scores, _ = build_reward("hpsv2", checkpoint_path=str(ckpt), arch=arch).score(images, PROMPTS)
        np.testing.assert_allclose(scores, reference, rtol=1e-6, atol=1e-7)


def test_hpsv2_errors_name_option_and_file(hps_checkpoint, tmp_path):
    """(A malicious pickle as checkpoint_path: tests/unit/test_security.py.)"""
    missing = tmp_path / "HPS_v2_compressed.pt"
    with pytest.raises(ValueError, match=rf"rewards\.hpsv2\.checkpoint_path.*{missing}"):
        build_reward("hpsv2", checkpoint_path=str(missing))
    path, _ = hps_checkpoint
    with pytest.raises(ValueError, match=rf"{path} does not fit the open_clip 'ViT-B-32'"):
        build_reward("hpsv2", checkpoint_path=str(path), arch="ViT-B-32")
    with pytest.raises(ValueError, match=r"rewards\.hpsv2\.arch.*unknown"):
        build_reward("hpsv2", checkpoint_path=str(path), arch="no-such-arch")


def test_hpsv2_package_loader_is_optional(hps_checkpoint):
    try:
        import hpsv2  # noqa: F401
    except Exception:
        path, _ = hps_checkpoint
        with pytest.raises(ValueError, match=r"rewards\.hpsv2\.loader.*not importable"):
            build_reward("hpsv2", checkpoint_path=str(path), arch=TINY_ARCH, loader="hpsv2")
    else:
        pytest.skip("hpsv2 is installed here; the not-importable error is not testable")


def test_open_clip_tokenizer_works_without_network(monkeypatch):
    """The ViT-H-14 tokenizer is open_clip's SimpleTokenizer with its BPE vocab from the wheel."""
    import open_clip

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    tokenizer = open_clip.get_tokenizer("ViT-H-14")
    tokens = tokenizer(["a red circle on a blue background"])
    assert isinstance(tokenizer, open_clip.tokenizer.SimpleTokenizer)
    assert tokens.shape == (1, 77) and int(tokens[0, 0]) == tokenizer.sot_token_id


# --- OCR backend options (the paddleocr backend itself: tests/unit/rewards/test_paddleocr_backend.py) ---------


def test_ocr_backend_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match=r"backend 'rapidocr' does not take option\(s\) text_detection_model_dir"):
        build_reward("ocr", text_detection_model_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"rewards\.ocr\.text_detection_model_dir"):
        build_reward("ocr", backend="paddleocr")
    missing = tmp_path / "rec"
    with pytest.raises(ValueError, match=rf"rewards\.ocr\.text_recognition_model_dir.*{missing}"):
        build_reward("ocr", backend="paddleocr", text_detection_model_dir=str(tmp_path),
                     text_recognition_model_dir=str(missing))
