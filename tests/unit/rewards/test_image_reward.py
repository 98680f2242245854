"""``image_reward`` (ImageReward, THUDM/ImageReward) on its stand-in in the published on-disk format
(ImageReward.pt with the published key names, med_config.json, a BERT tokenizer folder), loaded
through the reward's own code path; scores checked against an independent plain-torch forward of
the published architecture (vit.py, med.py, ImageReward.py) run on the published keys directly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from transformers import BertTokenizer

from rewardloop.rewards import available_rewards, build_reward, check_options
from rewardloop.rewards import image_reward as ir
from rewardloop.rewards.base import path_options
from rewardloop.smoke.standins import STANDINS, build_standin

torch.set_num_threads(1)

PROMPTS = ["a red circle on a blue background", "a green square", "a photo of a cat", "a red circle on a blue background"]


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return build_standin("image_reward", tmp_path_factory.mktemp("image_reward"))


@pytest.fixture(scope="module")
def reward(standin):
    return build_reward("image_reward", **standin)


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (40 + 8 * i, 56, 3), dtype=np.uint8)) for i in range(len(PROMPTS))]


def _published(standin):
    folder = Path(standin["checkpoint_path"])
    state = torch.load(folder / ir.CHECKPOINT, weights_only=True)
    return state, json.loads((folder / ir.MED_CONFIG).read_text())


# --- independent forward of the published architecture, straight from the published keys -------------


def _attention(q, k, v, heads, mask=None):
    b, n, d = q.shape
    q, k, v = (t.reshape(b, -1, heads, d // heads).transpose(1, 2) for t in (q, k, v))
    logits = q @ k.transpose(-1, -2) / (d // heads) ** 0.5
    if mask is not None:  # med.py get_extended_attention_mask: (1 - mask) * -10000
        logits = logits + (1.0 - mask[:, None, None, :].float()) * -10000.0
    return (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)


def _linear(x, sd, name):
    return F.linear(x, sd[name + ".weight"], sd[name + ".bias"])


def _norm(x, sd, name, eps):
    return F.layer_norm(x, x.shape[-1:], sd[name + ".weight"], sd[name + ".bias"], eps)


def reference_scores(sd, med, pixels, ids, mask):
    v = "blip.visual_encoder."
    patch = sd[v + "patch_embed.proj.weight"]
    x = F.conv2d(pixels, patch, sd[v + "patch_embed.proj.bias"], stride=patch.shape[-1]).flatten(2).transpose(1, 2)
    x = torch.cat([sd[v + "cls_token"].expand(len(x), -1, -1), x], 1) + sd[v + "pos_embed"]
    heads = x.shape[-1] // 64
    depth = len({k.split(".")[3] for k in sd if k.startswith(v + "blocks.")})
    for i in range(depth):  # vit.py Block: pre-norm attention and MLP, LayerNorm eps 1e-6
        b = f"{v}blocks.{i}."
        q, k, val = _linear(_norm(x, sd, b + "norm1", 1e-6), sd, b + "attn.qkv").chunk(3, -1)
        x = x + _linear(_attention(q, k, val, heads), sd, b + "attn.proj")
        x = x + _linear(F.gelu(_linear(_norm(x, sd, b + "norm2", 1e-6), sd, b + "mlp.fc1")), sd, b + "mlp.fc2")
    image = _norm(x, sd, v + "norm", 1e-6)
    t, eps = "blip.text_encoder.", med["layer_norm_eps"]
    h = sd[t + "embeddings.word_embeddings.weight"][ids] + sd[t + "embeddings.position_embeddings.weight"][: ids.shape[1]]
    h = _norm(h, sd, t + "embeddings.LayerNorm", eps)
    for i in range(med["num_hidden_layers"]):  # med.py BertLayer, mode='multimodal': post-norm
        layer = f"{t}encoder.layer.{i}."
        for block, source, m in (("attention", None, mask), ("crossattention", image, None)):
            src = h if source is None else source
            a = _attention(_linear(h, sd, layer + block + ".self.query"), _linear(src, sd, layer + block + ".self.key"),
                           _linear(src, sd, layer + block + ".self.value"), med["num_attention_heads"], m)
            h = _norm(_linear(a, sd, layer + block + ".output.dense") + h, sd, layer + block + ".output.LayerNorm", eps)
        inner = F.gelu(_linear(h, sd, layer + "intermediate.dense"))
        h = _norm(_linear(inner, sd, layer + "output.dense") + h, sd, layer + "output.LayerNorm", eps)
    r = h[:, 0]
    for index in (0, 2, 4, 6, 7):  # ImageReward.py MLP: Linears only (ReLUs commented out), dropout off
        r = _linear(r, sd, f"mlp.layers.{index}")
    return ((r.squeeze(-1) - 0.16717362830052426) / 1.0333394966054072).double().numpy()


# --- tests --------------------------------------------------------------------------------------------


def test_key_map_covers_every_published_key(standin, reward):
    state, _ = _published(standin)
    mapped = {}
    for key in state:
        target = ir.map_key(key)
        assert (target is None) == (key in ir.UNUSED_KEYS), key
        if target is not None:
            assert target not in mapped, f"{key} and {mapped.get(target)} map to {target}"
            mapped[target] = key
    assert set(mapped) == set(reward.model.state_dict()), "missing / unexpected keys"
    assert ir.UNUSED_KEYS <= set(state)  # the projections and position_ids ship in ImageReward.pt
    for target, key in mapped.items():
        assert torch.equal(reward.model.state_dict()[target], state[key]), key
    for bad in ("blip.visual_encoder.blocks.0.attn.qkv.scale", "mlp.layers.1.weight", "blip.itm_head.weight"):
        with pytest.raises(KeyError):
            ir.map_key(bad)


def test_scores_match_the_published_forward(standin, reward, images):
    scores, details = reward.score(images, PROMPTS)
    assert details == [{}] * len(PROMPTS) and scores.dtype == np.float64 and np.isfinite(scores).all()
    state, med = _published(standin)
    pixels = torch.stack([reward.preprocess(image) for image in images])
    text = reward.tokenize(PROMPTS)
    expected = reference_scores(state, med, pixels, text.input_ids, text.attention_mask)
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-5)
    # one pair at a time (as ImageReward.score) equals the batch, to float32 rounding: a batch of 1 and of 4 take
    # different matmul paths (measured on an Intel Xeon with AVX-512 at one thread: 1.1e-5 relative)
    single = np.array([reward.score([image], [prompt])[0][0] for image, prompt in zip(images, PROMPTS)])
    np.testing.assert_allclose(single, scores, rtol=1e-4, atol=1e-5)


def test_scores_are_deterministic_and_depend_on_image_and_prompt(standin, reward, images):
    again = build_reward("image_reward", **standin)
    first, _ = reward.score(images, PROMPTS)
    np.testing.assert_array_equal(again.score(images, PROMPTS)[0], first)
    same_image, _ = reward.score([images[0]] * 2, [PROMPTS[0], PROMPTS[1]])
    same_prompt, _ = reward.score([images[0], images[1]], [PROMPTS[0]] * 2)
    assert abs(same_image[0] - same_image[1]) > 1e-4
    assert abs(same_prompt[0] - same_prompt[1]) > 1e-4


def test_published_preprocessing_and_token_layout(reward):
    # a flat colour survives bicubic resize and crop exactly; then CLIP's mean/std
    colour = (200, 30, 90)
    pixels = reward.preprocess(Image.new("RGB", (300, 250), colour))
    assert pixels.shape == (3, 224, 224)
    expected = [(c / 255 - m) / s for c, m, s in zip(colour, ir.PIXEL_MEAN, ir.PIXEL_STD)]
    np.testing.assert_allclose(pixels.mean(dim=(1, 2)).numpy(), expected, rtol=1e-5)
    assert float(pixels.std(dim=(1, 2)).max()) < 1e-5
    # short side to 224 (bicubic), centre crop: a 448x224 image keeps its middle half
    wide = np.zeros((224, 448, 3), np.uint8)
    wide[:, 112:336] = 255
    assert float(reward.preprocess(Image.fromarray(wide))[0].min()) == pytest.approx((1 - ir.PIXEL_MEAN[0]) / ir.PIXEL_STD[0])
    # [CLS] words [SEP] [PAD]... at max_length 35, truncation keeps [SEP] last; [DEC]/[ENC] added as BLIP does
    tok = reward.tokenizer
    text = reward.tokenize(["A Red circle!", " ".join(["red"] * 50)])
    assert text.input_ids.shape == (2, 35)
    assert tok.convert_ids_to_tokens(text.input_ids[0][:6].tolist()) == ["[CLS]", "a", "red", "circle", "!", "[SEP]"]
    assert text.input_ids[0][6:].eq(tok.pad_token_id).all() and text.attention_mask[0].sum() == 6
    assert text.input_ids[1][-1] == tok.sep_token_id and text.attention_mask[1].all()
    assert tok.bos_token == "[DEC]" and "[ENC]" in tok.all_special_tokens


def test_tokenizer_without_blip_tokens_gets_them(standin, tmp_path):
    folder = tmp_path / "bert"
    folder.mkdir()
    vocab = (Path(standin["tokenizer_path"]) / "vocab.txt").read_text()
    (folder / "vocab.txt").write_text(vocab)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True}))
    size = len(BertTokenizer.from_pretrained(str(folder)))
    tokenizer = ir.load_tokenizer(folder, vocab_size=10_000)
    assert tokenizer.convert_tokens_to_ids(["[DEC]", "[ENC]"]) == [size, size + 1]
    assert tokenizer.tokenize("a [ENC] red") == ["a", "[ENC]", "red"]
    with pytest.raises(ValueError, match=r"tokenizer_path.*has \d+ tokens, more than the checkpoint's 20"):
        ir.load_tokenizer(folder, vocab_size=20)


def test_missing_or_broken_files_are_refused_naming_them(standin, tmp_path):
    source = Path(standin["checkpoint_path"])
    tok = standin["tokenizer_path"]
    with pytest.raises(ValueError, match=r"rewards\.image_reward\.checkpoint_path.*does not exist"):
        build_reward("image_reward", checkpoint_path=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"rewards\.image_reward\.checkpoint_path.*does not exist"):
        check_options({"image_reward": {"checkpoint_path": str(tmp_path / "nowhere")}})
    for name, damage, match in (
        ("ImageReward.pt", "delete", r"ImageReward\.pt does not exist.*med_config\.json from THUDM/ImageReward"),
        ("med_config.json", "delete", r"med_config\.json does not exist"),
        ("ImageReward.pt", "truncate", r"ImageReward\.pt refused or unreadable by torch\.load\(weights_only=True\)"),
        ("med_config.json", "truncate", r"med_config\.json is not a JSON object"),
    ):
        folder = tmp_path / f"{damage}-{name}"
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns("tokenizer"))
        if damage == "delete":
            (folder / name).unlink()
        else:
            data = (folder / name).read_bytes()
            (folder / name).write_bytes(data[: len(data) // 2])
        with pytest.raises(ValueError, match=match):
            build_reward("image_reward", checkpoint_path=str(folder), tokenizer_path=tok)
    # a state dict lacking a published key, or with a foreign one, names the file and the layout
    state, _ = _published(standin)
    for edit in ("drop", "extra"):
        folder = tmp_path / f"keys-{edit}"
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns("tokenizer"))
        changed = dict(state)
        if edit == "drop":
            del changed["mlp.layers.7.weight"]
        else:
            changed["blip.itm_head.weight"] = torch.zeros(2, 32)
        torch.save(changed, folder / ir.CHECKPOINT)
        with pytest.raises(ValueError, match=r"ImageReward\.pt is not an ImageReward checkpoint.*blip\.visual_encoder"):
            build_reward("image_reward", checkpoint_path=str(folder), tokenizer_path=tok)
    with pytest.raises(ValueError, match=r"rewards\.image_reward\.tokenizer_path.*no BERT tokenizer"):
        build_reward("image_reward", checkpoint_path=str(source), tokenizer_path=str(tmp_path))


def test_every_reward_is_documented_and_each_needing_files_has_a_standin():
    docs = (Path(__file__).resolve().parents[3] / "docs" / "rewards.md").read_text()
    from rewardloop.rewards.base import _FACTORIES

    for name in available_rewards():
        if not _FACTORIES[name].__module__.startswith("rewardloop.rewards."):
            continue  # registered by a test
        assert f"`{name}`" in docs, f"docs/rewards.md does not document {name}"
        if any(required for _, required in path_options(name).values()):
            assert name in STANDINS, f"{name} needs local files but has no stand-in"
