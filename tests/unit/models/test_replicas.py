"""Replicas of the published checkpoints: layout, configs, tokenizers, weights, loading, generation.

The published values come from rewardloop.models.published (sources cited there); where a file of
the real checkpoint was at hand (SD1.5, SDXL), its git blob id or LFS byte size is the reference,
so these tests compare against the published files, not against the dicts that wrote them.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import torch

from rewardloop.models import published as P
from rewardloop.models.replicas import (FAMILIES, TINY_OVERRIDES, VARIANTS, WIDTH_DEPTH_KEYS, ReplicaError,
                                        build_replica, component_kind, flatten, json_text, replica_files,
                                        tiny_overrides, variant_of)

PROMPTS = ["a red circle on a blue background", "A photo of a raccoon eating a sandwich in a park, 4k!",
           "an astronaut riding a horse on the moon"]
DENOISER = {"sd15": "unet", "sdxl": "unet", "sd3": "transformer", "flux": "transformer"}
# The variants other than each family's default (those are built by the `replicas` fixture).
OTHER_VARIANTS = [(family, variant) for family in FAMILIES for variant in VARIANTS[family][1:]]


def t5_tokenizer_files(family: str) -> set[str]:
    """The tokenizer_config.json paths of the family's T5 tokenizers (their vocabulary entries are filled
    in when written, so the written file is not the dict)."""
    index = P.PUBLISHED_FILES[family]["model_index.json"]
    return {f"{name}/tokenizer_config.json" for name, entry in index.items()
            if isinstance(entry, list) and entry[1] == "T5TokenizerFast"}


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only add overhead (and contention on shared CPUs)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory, one_thread) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("replicas")
    out = {}
    for family in FAMILIES:
        build_replica(family, root / family, seed=0)
        out[family] = root / family
    return out


@pytest.fixture(scope="module")
def pipes(replicas):
    """Each tiny replica loaded through the project's own loader."""
    from rewardloop.models.loading import load_pipeline

    return {family: load_pipeline({"family": family, "path": str(path)}, device="cpu")
            for family, path in replicas.items()}


# --- configs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["sd15", "sdxl"])
def test_full_size_configs_are_byte_identical_to_the_published_files(family):
    files = replica_files(family, "full")
    assert set(P.CONFIG_GIT_BLOBS[family]) <= set(files)
    for path, blob in P.CONFIG_GIT_BLOBS[family].items():
        assert git_blob(json_text(files[path]).encode()) == blob, path


@pytest.mark.parametrize("family", FAMILIES)
def test_written_model_index_and_scheduler_are_the_published_ones(replicas, family):
    folder = replicas[family]
    index = json.loads((folder / "model_index.json").read_text())
    assert index == P.PUBLISHED_FILES[family]["model_index.json"]
    components = {k for k, v in index.items() if isinstance(v, list)}
    assert components == {p.name for p in folder.iterdir() if p.is_dir()}  # one folder per component, no more
    scheduler = (folder / "scheduler" / "scheduler_config.json").read_text()
    assert json.loads(scheduler) == P.PUBLISHED_FILES[family]["scheduler/scheduler_config.json"]
    for path, blob in P.CONFIG_GIT_BLOBS.get(family, {}).items():
        if path not in TINY_OVERRIDES[family]:  # every file a tiny replica does not resize: byte-identical
            assert git_blob((folder / path).read_bytes()) == blob, path


def test_published_component_tables():
    def table(family):
        return {k: tuple(v) for k, v in P.PUBLISHED_FILES[family]["model_index.json"].items() if isinstance(v, list)}

    assert table("sd15")["safety_checker"] == ("stable_diffusion", "StableDiffusionSafetyChecker")
    assert table("sd15")["feature_extractor"] == ("transformers", "CLIPImageProcessor")
    assert table("sdxl")["text_encoder_2"] == ("transformers", "CLIPTextModelWithProjection")
    assert P.SDXL_MODEL_INDEX["force_zeros_for_empty_prompt"] is True
    assert table("sd3")["text_encoder_3"] == ("transformers", "T5EncoderModel")
    assert table("sd3")["tokenizer_3"] == ("transformers", "T5TokenizerFast")
    assert {table(f)["scheduler"][1] for f in FAMILIES} == {"PNDMScheduler", "EulerDiscreteScheduler",
                                                           "FlowMatchEulerDiscreteScheduler"}
    assert P.SD3_SCHEDULER["shift"] == 3.0
    assert P.SD3_TRANSFORMER["dual_attention_layers"] == list(range(13)) and P.SD3_TRANSFORMER["num_layers"] == 24


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_configs_differ_from_published_only_in_width_and_depth(replicas, family):
    for path, published in P.PUBLISHED_FILES[family].items():
        written = json.loads((replicas[family] / path).read_text()) if path not in t5_tokenizer_files(family) \
            else None
        if written is None:
            continue
        full, tiny = flatten(published), flatten(written)
        assert set(full) == set(tiny), path  # no key added or dropped
        changed = {k for k in full if full[k] != tiny[k]}
        if path in TINY_OVERRIDES[family]:
            allowed = WIDTH_DEPTH_KEYS[component_kind(family, path.split("/")[0])]
            assert changed and changed <= allowed, (path, changed - allowed)
        else:
            assert not changed, (path, changed)


def test_tiny_sd3_keeps_both_block_kinds(pipes):
    config = pipes["sd3"].transformer.config
    dual = config.dual_attention_layers
    assert 0 < len(dual) < config.num_layers and list(dual) == list(range(len(dual)))  # a proper prefix
    assert config.qk_norm == "rms_norm" and config.patch_size == 2 and config.pos_embed_max_size == 384


# --- loading -----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_components_load_with_their_published_classes(replicas, pipes, family):
    import diffusers
    import transformers

    index = P.PUBLISHED_FILES[family]["model_index.json"]
    plain = type(pipes[family]).from_pretrained(replicas[family], dtype=torch.float32)
    for pipe in (pipes[family], plain):
        for name, (library, class_name) in ((k, v) for k, v in index.items() if isinstance(v, list)):
            if family == "sd15" and name == "safety_checker" and pipe is pipes[family]:
                assert pipe.safety_checker is None  # the project's loader turns it off
                continue
            module = {"diffusers": diffusers, "transformers": transformers,
                      "stable_diffusion": diffusers.pipelines.stable_diffusion}[library]
            expected = getattr(module, class_name)
            assert isinstance(getattr(pipe, name), expected), (name, type(getattr(pipe, name)))
    assert pipes[family].vae_scale_factor == 8


@pytest.mark.parametrize("family, scale, shift, channels", [("sd15", 0.18215, None, 4), ("sdxl", 0.13025, None, 4),
                                                            ("sd3", 1.5305, 0.0609, 16), ("flux", 0.3611, 0.1159, 16)])
def test_vae_latent_contract(pipes, family, scale, shift, channels):
    vae = pipes[family].vae
    assert vae.config.scaling_factor == scale and vae.config.latent_channels == channels
    assert vae.config.force_upcast is True
    assert vae.config.get("shift_factor") == shift
    assert (vae.quant_conv is None) == (family in ("sd3", "flux"))  # the 16-channel VAEs have no quant convs


@pytest.mark.parametrize("family", ["sd15", "sdxl"])
def test_fp16_variant_loads_and_matches_the_main_weights(replicas, pipes, family):
    cls = type(pipes[family])
    half = cls.from_pretrained(replicas[family], variant="fp16", dtype=torch.float16,
                               **({"safety_checker": None} if family == "sd15" else {}))
    for name in P.WEIGHTS[family]:
        if name == "safety_checker":
            continue
        main = dict(getattr(pipes[family], name).named_parameters())
        for key, value in getattr(half, name).named_parameters():
            assert value.dtype == torch.float16
            assert torch.equal(value, main[key].half()), (name, key)


def test_sd3_storage_as_published(replicas):
    from safetensors import safe_open

    folder = replicas["sd3"]
    assert not list(folder.rglob("*.fp16.safetensors"))  # SD3.5-M publishes no variants
    t5 = sorted(p.name for p in (folder / "text_encoder_3").iterdir())
    assert t5 == ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                  "model.safetensors.index.json"]
    index = json.loads((folder / "text_encoder_3" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    for component, (stem, dtype, *_) in P.WEIGHTS["sd3"].items():
        for path in (folder / component).glob("*.safetensors"):
            with safe_open(path, "pt") as fh:
                assert {fh.get_slice(k).get_dtype() for k in fh.keys()} == {{"bfloat16": "BF16", "float16": "F16"}[dtype]}


# --- tokenizers --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_clip_tokenizers_are_clips(replicas, pipes, family):
    from open_clip.tokenizer import SimpleTokenizer

    reference = SimpleTokenizer()  # open_clip's own BPE implementation, same merges file
    pipe = pipes[family]
    index = P.PUBLISHED_FILES[family]["model_index.json"]
    for name in ("tokenizer", "tokenizer_2"):
        if index.get(name, [None, None])[1] != "CLIPTokenizer":  # absent, or T5's (FLUX's tokenizer_2)
            continue
        folder = replicas[family] / name
        assert git_blob((folder / "vocab.json").read_bytes()) == P.CLIP_VOCAB_GIT_BLOB
        assert git_blob((folder / "merges.txt").read_bytes()) == P.CLIP_MERGES_GIT_BLOB
        tokenizer = getattr(pipe, name)
        assert len(tokenizer) == 49408 and tokenizer.model_max_length == 77
        for prompt in PROMPTS:
            if name == "tokenizer_2":  # its pad token "!" is a special token: a "!" in the text becomes pad
                assert tokenizer(prompt).input_ids.count(0) == prompt.count("!")
                prompt = prompt.replace("!", "")
            assert tokenizer(prompt).input_ids == [49406, *reference.encode(prompt), 49407]
        padded = tokenizer(PROMPTS[0], padding="max_length", max_length=77).input_ids
        assert len(padded) == 77
        assert tokenizer.pad_token == ("!" if name == "tokenizer_2" else "<|endoftext|>")
        assert padded[-1] == (0 if name == "tokenizer_2" else 49407)


def test_t5_tokenizer(replicas, pipes):
    from transformers import T5TokenizerFast

    from rewardloop.models.tiny.t5_tokenizer import train_spiece

    assert train_spiece() == train_spiece()  # training is deterministic
    folder = replicas["sd3"] / "tokenizer_3"
    assert (folder / "spiece.model").read_bytes() == train_spiece()
    assert sorted(p.name for p in folder.iterdir()) == ["special_tokens_map.json", "spiece.model", "tokenizer.json",
                                                        "tokenizer_config.json"]
    tokenizer = pipes["sd3"].tokenizer_3
    assert isinstance(tokenizer, T5TokenizerFast) and tokenizer.model_max_length == 512
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)
    assert (tokenizer.pad_token, tokenizer.eos_token, tokenizer.unk_token) == ("<pad>", "</s>", "<unk>")
    assert tokenizer.convert_tokens_to_ids("<extra_id_0>") == len(tokenizer) - 1
    assert tokenizer.convert_tokens_to_ids("<extra_id_99>") == len(tokenizer) - 100
    assert len(tokenizer) > 1000
    for prompt in PROMPTS:
        ids = tokenizer(prompt).input_ids
        assert ids[-1] == 1 and 1 not in ids[:-1] and tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids, skip_special_tokens=True) == prompt
    assert len(tokenizer(PROMPTS[1], padding="max_length", max_length=256).input_ids) == 256


def test_sd3_prompt_embeddings_have_clip_plus_t5_tokens(pipes):
    pipe = pipes["sd3"]
    embeds, _, pooled, _ = pipe.encode_prompt(prompt=PROMPTS, prompt_2=None, prompt_3=None,
                                              max_sequence_length=256, do_classifier_free_guidance=False)
    joint = pipe.transformer.config.joint_attention_dim
    assert embeds.shape == (len(PROMPTS), 77 + 256, joint)
    assert pooled.shape == (len(PROMPTS), pipe.transformer.config.pooled_projection_dim)
    assert embeds[:, 77:].abs().sum() > 0  # the T5 part is not padding


# --- generation --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_a_plain_pipeline_call_runs(replicas, family, one_thread):
    from rewardloop.models.families import get_family

    # dtype given: transformers 5 loads a text encoder in its config's torch_dtype otherwise (SDXL's and
    # SD3's published configs say float16), next to a float32 denoiser
    pipe = get_family(family).pipeline_class().from_pretrained(replicas[family], dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    image = pipe(PROMPTS[0], height=64, width=64, num_inference_steps=2).images[0]
    assert image.size == (64, 64)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_64px_denoiser_step_is_fast(pipes, family, one_thread):
    from rewardloop.models.families import get_family

    pipe, fam = pipes[family], get_family(family)
    cond = fam.encode(pipe, PROMPTS[:1])
    denoiser = getattr(pipe, fam.denoiser)
    latents = torch.randn(1, *fam.latent_shape(pipe, 8 * pipe.vae_scale_factor))
    with torch.no_grad():
        step = lambda: fam.predict(denoiser, latents, torch.tensor([500.0]), cond, pixel_size=64)  # noqa: E731
        step()
        started = time.perf_counter()
        out = step()
        elapsed = time.perf_counter() - started
    assert out.shape == latents.shape
    assert elapsed < 1.0  # tens of milliseconds on one core


# --- determinism, CLI, errors --------------------------------------------------------------------


def test_same_seed_same_bytes_other_seed_other_weights(replicas, tmp_path, one_thread):
    build_replica("sd3", tmp_path / "again", seed=0)
    build_replica("sd3", tmp_path / "other", seed=1)
    drawn = build_replica("sd3", tmp_path / "drawn-on-cpu", seed=0, device="cpu")  # the device named explicitly
    first, again, other = digests(replicas["sd3"]), digests(tmp_path / "again"), digests(tmp_path / "other")
    assert again == first == digests(tmp_path / "drawn-on-cpu") and drawn["device"] == "cpu"
    changed = {path for path in first if other[path] != first[path]}
    assert changed == {path for path in first if path.endswith(".safetensors")}
    from rewardloop.artifacts import default_mode

    modes = {(tmp_path / "again" / path).stat().st_mode & 0o777 for path in first}
    assert modes == {default_mode()}  # the weights too (save_pretrained writes them owner-only)


def test_cli_builds_a_replica(tmp_path, capsys, one_thread):
    from rewardloop.cli.main import main

    out = tmp_path / "sdxl-tiny"
    assert main(["build-replica", "--family", "sdxl", "--out", str(out), "--seed", "2"]) == 0
    assert "stabilityai/stable-diffusion-xl-base-1.0" in capsys.readouterr().out
    assert json.loads((out / "model_index.json").read_text()) == P.SDXL_MODEL_INDEX
    assert (out / "unet" / "diffusion_pytorch_model.fp16.safetensors").is_file()
    with pytest.raises(SystemExit):
        main(["build-replica", "--family", "sd2", "--out", str(tmp_path / "x")])
    if not torch.cuda.is_available():  # weights drawn on a GPU that is not there: said, nothing written
        with pytest.raises(SystemExit, match="--device cuda, but torch sees no CUDA device"):
            main(["build-replica", "--family", "sdxl", "--out", str(tmp_path / "gpu"), "--device", "cuda"])
        assert not (tmp_path / "gpu").exists()


def test_unknown_size_writes_nothing(tmp_path):
    with pytest.raises(ReplicaError, match="size"):
        build_replica("sd15", tmp_path / "x", size="medium")
    assert not any(tmp_path.iterdir())


# --- full size (meta device: no memory, no compute) ----------------------------------------------


def _full_components():
    return [(family, component) for family in FAMILIES for component in P.WEIGHTS[family]]


def _meta_model(family, component):
    from rewardloop.models.replicas import _instantiate

    files = replica_files(family, "full")
    with torch.device("meta"):
        return _instantiate(files["model_index.json"][component][1], files[f"{component}/config.json"])


@pytest.mark.parametrize("family, component", _full_components())
def test_full_size_matches_published_parameter_counts_and_file_sizes(family, component):
    model = _meta_model(family, component)
    params = sum(p.numel() for p in model.parameters())
    stored = sum(t.numel() for t in model.state_dict().values())  # what the weights file holds
    if (family, component) in P.PARAMETERS:
        assert params == P.PARAMETERS[family, component]
    for path, size in P.LFS_SIZES.get(family, {}).items():
        if path.startswith(component + "/"):
            per_element = 2 if ".fp16." in path else 4
            header = size - per_element * stored  # a safetensors header: names, shapes, offsets
            assert 0 < header < 256 * 1024, (path, header)
    if (family, component) in P.ROUNDED_PARAMETERS:
        figure, tolerance = P.ROUNDED_PARAMETERS[family, component]
        assert abs(stored - figure) <= tolerance


# --- variants: SD3.5 Large / Large Turbo, FLUX.1-dev / FLUX.1-schnell ------------------------------


def test_every_family_has_its_published_default_first():
    assert VARIANTS["sd15"] == ("v1-5",) and VARIANTS["sdxl"] == ("base-1.0",)
    assert VARIANTS["sd3"] == ("medium", "large", "large-turbo") and VARIANTS["flux"] == ("dev", "schnell")
    for family in FAMILIES:  # the default variant is what PUBLISHED_FILES / WEIGHTS / PUBLISHED_REPOS hold
        default = P.VARIANTS[family][VARIANTS[family][0]]
        assert default["files"] is P.PUBLISHED_FILES[family] and default["weights"] is P.WEIGHTS[family]
        assert default["repo"] == P.PUBLISHED_REPOS[family]
        assert replica_files(family, "full") == replica_files(family, "full", VARIANTS[family][0])
    assert variant_of("flux", "black-forest-labs/FLUX.1-schnell") == "schnell"
    assert variant_of("sd3", "stabilityai/stable-diffusion-3.5-large-turbo") == "large-turbo"
    assert variant_of("flux", "some/other-model") is None


def test_flux_published_values_as_written():
    dev, schnell = (P.VARIANTS["flux"][v]["files"] for v in ("dev", "schnell"))
    index = {k: tuple(v) for k, v in P.FLUX_MODEL_INDEX.items() if isinstance(v, list)}
    assert index == {"scheduler": ("diffusers", "FlowMatchEulerDiscreteScheduler"),
                     "text_encoder": ("transformers", "CLIPTextModel"),
                     "text_encoder_2": ("transformers", "T5EncoderModel"),
                     "tokenizer": ("transformers", "CLIPTokenizer"), "tokenizer_2": ("transformers", "T5TokenizerFast"),
                     "transformer": ("diffusers", "FluxTransformer2DModel"), "vae": ("diffusers", "AutoencoderKL")}
    assert dev["model_index.json"] == schnell["model_index.json"] == P.FLUX_MODEL_INDEX
    sched = dev["scheduler/scheduler_config.json"]
    assert (sched["use_dynamic_shifting"], sched["base_shift"], sched["max_shift"], sched["base_image_seq_len"],
            sched["max_image_seq_len"], sched["shift"]) == (True, 0.5, 1.15, 256, 4096, 3.0)
    sched = schnell["scheduler/scheduler_config.json"]
    assert (sched["use_dynamic_shifting"], sched["shift"]) == (False, 1.0)
    for files, guidance in ((dev, True), (schnell, False)):
        t = files["transformer/config.json"]
        assert (t["attention_head_dim"], t["num_attention_heads"], t["num_layers"], t["num_single_layers"],
                t["in_channels"], t["joint_attention_dim"], t["pooled_projection_dim"], t["patch_size"],
                t["guidance_embeds"]) == (128, 24, 19, 38, 64, 4096, 768, 1, guidance)
        assert "axes_dims_rope" not in t  # diffusers' default (16, 56, 56) applies
        vae = files["vae/config.json"]
        assert (vae["latent_channels"], vae["scaling_factor"], vae["shift_factor"], vae["use_quant_conv"]) == \
            (16, 0.3611, 0.1159, False)
        assert files["text_encoder/config.json"]["hidden_size"] == t["pooled_projection_dim"]  # CLIP pooled
        assert files["text_encoder_2/config.json"]["d_model"] == t["joint_attention_dim"]  # T5 states
    import inspect

    from diffusers import FluxTransformer2DModel

    assert inspect.signature(FluxTransformer2DModel.__init__).parameters["axes_dims_rope"].default == (16, 56, 56)
    # The byte size of each file as the hub tree lists it (the data file's config_sizes) equals the dict written out.
    for variant in ("dev", "schnell"):
        sizes, files = P.CONFIG_SIZES["flux", variant], P.VARIANTS["flux"][variant]["files"]
        for path, size in sizes.items():
            assert len(json_text(files[path]).encode()) == size, (variant, path)


def test_sd35_large_published_values_as_written():
    for variant in ("large", "large-turbo"):
        files = P.VARIANTS["sd3"][variant]["files"]
        t = files["transformer/config.json"]
        assert (t["num_layers"], t["attention_head_dim"], t["num_attention_heads"], t["caption_projection_dim"],
                t["joint_attention_dim"], t["pooled_projection_dim"], t["patch_size"], t["pos_embed_max_size"],
                t["qk_norm"]) == (38, 64, 38, 2432, 4096, 2048, 2, 192, "rms_norm")
        assert "dual_attention_layers" not in t  # MMDiT, not Medium's MMDiT-X
        assert t["caption_projection_dim"] == t["num_attention_heads"] * t["attention_head_dim"]
        assert files["scheduler/scheduler_config.json"] == {"_class_name": "FlowMatchEulerDiscreteScheduler",
                                                            "_diffusers_version": "0.29.0.dev0",
                                                            "num_train_timesteps": 1000, "shift": 3.0}
        for path in ("model_index.json", "text_encoder/config.json", "text_encoder_2/config.json",
                     "text_encoder_3/config.json", "tokenizer_3/tokenizer_config.json"):
            assert files[path] == P.PUBLISHED_FILES["sd3"][path], path  # the text side is SD3's
    assert P.VARIANTS["sd3"]["large-turbo"]["sampling"] == {"num_inference_steps": 4, "guidance_scale": 0.0}
    files = P.VARIANTS["sd3"]["large"]["files"]
    for path, size in P.CONFIG_SIZES["sd3", "large"].items():
        assert len(json_text(files[path]).encode()) == size, path


def _variant_meta_model(family, variant, component):
    from rewardloop.models.replicas import _instantiate

    files = replica_files(family, "full", variant)
    with torch.device("meta"):
        return _instantiate(files["model_index.json"][component][1], files[f"{component}/config.json"])


@pytest.mark.parametrize("family, variant, component", sorted(P.VARIANT_PARAMETERS))
def test_full_size_variants_match_published_parameter_counts(family, variant, component):
    model = _variant_meta_model(family, variant, component)  # meta tensors: no memory, no compute
    params = sum(p.numel() for p in model.parameters())
    stored = sum(t.numel() for t in model.state_dict().values())
    assert params == P.VARIANT_PARAMETERS[family, variant, component]
    if (family, variant, component) in P.FILE_SIZES:
        _, size, per_value = P.FILE_SIZES[family, variant, component]
        header = size - per_value * stored
        assert 0 < header < 256 * 1024, header
    if (family, variant, component) in P.INDEX_TOTAL_SIZES:
        assert 2 * stored == P.INDEX_TOTAL_SIZES[family, variant, component]  # bf16, exact
    if (family, variant, component) in P.VARIANT_ROUNDED_PARAMETERS:
        figure, tolerance = P.VARIANT_ROUNDED_PARAMETERS[family, variant, component]
        assert abs(params - figure) <= tolerance


def test_flux_guidance_embedder_is_the_dev_schnell_difference():
    dev = _variant_meta_model("flux", "dev", "transformer")
    schnell = _variant_meta_model("flux", "schnell", "transformer")
    schnell_keys = set(schnell.state_dict())
    extra = {k: v.numel() for k, v in dev.state_dict().items() if k not in schnell_keys}
    assert all(k.startswith("time_text_embed.guidance_embedder.") for k in extra)
    assert sum(extra.values()) == 256 * 3072 + 3072 + 3072 * 3072 + 3072


@pytest.fixture(scope="module")
def variant_replicas(tmp_path_factory, one_thread) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("variants")
    out = {}
    for family, variant in OTHER_VARIANTS:
        stats = build_replica(family, root / f"{family}-{variant}", variant=variant)
        assert (stats["variant"], stats["repo"]) == (variant, P.VARIANTS[family][variant]["repo"])
        out[family, variant] = root / f"{family}-{variant}"
    return out


@pytest.mark.parametrize("family, variant", OTHER_VARIANTS)
def test_tiny_variant_replica_loads_and_runs_one_denoiser_step(variant_replicas, family, variant, one_thread):
    from rewardloop.models.families import get_family
    from rewardloop.models.layout import check_model_folder
    from rewardloop.models.loading import load_pipeline

    folder = variant_replicas[family, variant]
    check_model_folder(str(folder), family)
    published = P.VARIANTS[family][variant]["files"]
    for path, full in published.items():
        if path in t5_tokenizer_files(family):
            continue
        written = json.loads((folder / path).read_text())
        changed = {k for k, v in flatten(full).items() if flatten(written).get(k, object()) != v}
        assert set(flatten(written)) == set(flatten(full)), path  # no key added or dropped
        allowed = WIDTH_DEPTH_KEYS[component_kind(family, path.split("/")[0])] if path in tiny_overrides(
            family, variant) else set()
        assert changed <= allowed, (path, changed - allowed)
    pipe = load_pipeline({"family": family, "path": str(folder)}, device="cpu")
    fam = get_family(family)
    denoiser = getattr(pipe, fam.denoiser)
    assert type(denoiser).__name__ == published["model_index.json"][fam.denoiser][1]
    cond = fam.encode(pipe, PROMPTS[:2])
    shape = fam.latent_shape(pipe, 8 * pipe.vae_scale_factor)
    latents = torch.randn(2, *shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = fam.predict(denoiser, latents, torch.tensor([500.0, 250.0]), cond, pixel_size=64, guidance_scale=3.5)
    assert out.shape == latents.shape and torch.isfinite(out).all() and out.abs().sum() > 0
    if family == "flux":
        assert denoiser.config.guidance_embeds is (variant == "dev")
        assert pipe.scheduler.config.use_dynamic_shifting is (variant == "dev")
    else:  # SD3.5 Large: 38 heads x 64 and no dual-attention blocks at full size; tiny keeps no dual blocks
        assert not denoiser.config.get("dual_attention_layers") and denoiser.config.qk_norm == "rms_norm"


def test_flux_storage_as_published(replicas, variant_replicas):
    from safetensors import safe_open

    for folder in (replicas["flux"], variant_replicas["flux", "schnell"]):
        assert not list(folder.rglob("*.fp16.safetensors"))
        assert sorted(p.name for p in (folder / "transformer").iterdir()) == [
            "config.json", *(f"diffusion_pytorch_model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)),
            "diffusion_pytorch_model.safetensors.index.json"]
        assert sorted(p.name for p in (folder / "text_encoder_2").glob("*.safetensors")) == [
            "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        for component in P.WEIGHTS["flux"]:
            for path in (folder / component).glob("*.safetensors"):
                with safe_open(path, "pt") as fh:
                    assert {fh.get_slice(k).get_dtype() for k in fh.keys()} == {"BF16"}, path
        tokenizer_2 = sorted(p.name for p in (folder / "tokenizer_2").iterdir())
        assert tokenizer_2 == ["special_tokens_map.json", "spiece.model", "tokenizer.json", "tokenizer_config.json"]
    large = variant_replicas["sd3", "large"]
    assert len(list((large / "transformer").glob("diffusion_pytorch_model-*-of-00002.safetensors"))) == 2
    assert (large / "text_encoder_2" / "model.fp16.safetensors").is_file()


def test_flux_tokenizers(pipes):
    from transformers import CLIPTokenizer, T5TokenizerFast

    pipe = pipes["flux"]
    assert isinstance(pipe.tokenizer, CLIPTokenizer) and isinstance(pipe.tokenizer_2, T5TokenizerFast)
    assert pipe.tokenizer.model_max_length == 77 and pipe.tokenizer_2.model_max_length == 512
    embeds, pooled, text_ids = pipe.encode_prompt(prompt=PROMPTS, prompt_2=None, max_sequence_length=512)
    assert embeds.shape == (len(PROMPTS), 512, pipe.transformer.config.joint_attention_dim)
    assert pooled.shape == (len(PROMPTS), pipe.transformer.config.pooled_projection_dim)


def test_cli_variant(tmp_path, capsys, one_thread):
    from rewardloop.cli.main import main

    out = tmp_path / "schnell"
    assert main(["build-replica", "--family", "flux", "--variant", "schnell", "--out", str(out)]) == 0
    assert "black-forest-labs/FLUX.1-schnell" in capsys.readouterr().out
    assert json.loads((out / "transformer" / "config.json").read_text())["guidance_embeds"] is False
    assert json.loads((out / "scheduler" / "scheduler_config.json").read_text()) == P.FLUX_SCHNELL_SCHEDULER
    with pytest.raises(SystemExit) as refused:
        main(["build-replica", "--family", "flux", "--variant", "pro", "--out", str(tmp_path / "pro")])
    assert "'pro'" in str(refused.value) and "dev, schnell" in str(refused.value)
    assert not (tmp_path / "pro").exists()


def test_default_variant_and_unknown_variant_refused(replicas, tmp_path):
    # FAMILIES' replicas are built without a variant: the published defaults (FLUX.1-dev: guidance embedded)
    assert json.loads((replicas["flux"] / "transformer" / "config.json").read_text())["guidance_embeds"] is True
    assert json.loads((replicas["sd3"] / "transformer" / "config.json").read_text())["dual_attention_layers"]
    stats_dir = tmp_path / "x"
    with pytest.raises(ReplicaError, match=r"variant: unknown 'xl' for family sd3 \(expected one of medium, large, "
                                           r"large-turbo\)"):
        build_replica("sd3", stats_dir, variant="xl")
    with pytest.raises(ReplicaError, match="v1-5"):
        replica_files("sd15", "tiny", "v2")
    assert not any(tmp_path.iterdir())
