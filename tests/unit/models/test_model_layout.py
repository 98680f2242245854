"""A model folder that cannot run is refused at startup, naming the file and what was expected.

The folders here hold only the small JSON files the check reads (and an empty weights file): the
check must decide from them alone, before any job loads a weight.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardloop.models.layout import LayoutError, check_model_folder

FLOW = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 3.0}
PNDM = {"_class_name": "PNDMScheduler", "beta_schedule": "scaled_linear", "num_train_timesteps": 1000}
# published component lists (model_index.json) of stable-diffusion-v1-5 and stable-diffusion-3.5-medium
SD15 = {"_class_name": "StableDiffusionPipeline", "feature_extractor": ["transformers", "CLIPImageProcessor"],
        "safety_checker": ["stable_diffusion", "StableDiffusionSafetyChecker"], "scheduler": ["diffusers", "PNDMScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
        "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"]}
SD35 = {"_class_name": "StableDiffusion3Pipeline", "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModelWithProjection"],
        "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
        "text_encoder_3": ["transformers", "T5EncoderModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
        "tokenizer_2": ["transformers", "CLIPTokenizer"], "tokenizer_3": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "SD3Transformer2DModel"], "vae": ["diffusers", "AutoencoderKL"]}


def layout(root: Path, index: dict, scheduler: dict, weights=("diffusion_pytorch_model.safetensors",),
           skip=()) -> Path:
    """A folder with model_index.json, a subfolder per listed component and the denoiser's weights files."""
    root.mkdir(parents=True)
    (root / "model_index.json").write_text(json.dumps(index))
    for name, entry in index.items():
        if not name.startswith("_") and entry and entry[0] and name not in skip:
            (root / name).mkdir()
            (root / name / "config.json").write_text("{}")
    (root / "scheduler" / "scheduler_config.json").write_text(json.dumps(scheduler))
    denoiser = root / ("transformer" if "transformer" in index else "unet")
    for name in weights:
        (denoiser / name).write_bytes(b"")
    return root


def test_the_published_layouts_pass(tmp_path):
    check_model_folder(str(layout(tmp_path / "sd15", SD15, PNDM)), "sd15")
    check_model_folder(str(layout(tmp_path / "sd35", SD35, FLOW)), "sd3")
    no_t5 = {**SD35, "text_encoder_3": [None, None], "tokenizer_3": [None, None]}
    check_model_folder(str(layout(tmp_path / "sd35-no-t5", no_t5, FLOW)), "sd3")
    # the safety checker is never loaded (rewards judge the images): its folder may be left out
    check_model_folder(str(layout(tmp_path / "sd15-lean", SD15, PNDM, skip=("safety_checker",))), "sd15")


@pytest.mark.parametrize("case, family, index, scheduler, weights, message", [
    ("wrong family", "sd15", SD35, FLOW, None,
     r"model_index\.json names 'StableDiffusion3Pipeline', a model\.family sd3 model, but model\.family sd15 "
     r"expects StableDiffusionPipeline$"),
    ("unknown pipeline", "sd15", {**SD15, "_class_name": "StableDiffusionInpaintPipeline"}, PNDM, None,
     r"names 'StableDiffusionInpaintPipeline' but model\.family sd15 expects StableDiffusionPipeline$"),
    ("missing component", "sd3", {k: v for k, v in SD35.items() if k != "text_encoder_2"}, FLOW, None,
     r"model_index\.json does not list it: component 'text_encoder_2', which model\.family sd3 needs$"),
    ("null component", "sd15", {**SD15, "vae": [None, None]}, PNDM, None,
     r"model_index\.json lists it as null: component 'vae', which model\.family sd15 needs$"),
    ("T5 tokenizer without T5", "sd3", {**SD35, "text_encoder_3": [None, None]}, FLOW, None,
     r"lists tokenizer_3 but not text_encoder_3: T5 needs both"),
    ("T5 without its tokenizer", "sd3", {**SD35, "tokenizer_3": [None, None]}, FLOW, None,
     r"lists text_encoder_3 but not tokenizer_3: T5 needs both"),
    ("unknown scheduler class", "sd15", SD15, {**PNDM, "_class_name": "LCMScheduler"}, None,
     r"scheduler_config\.json names 'LCMScheduler'; model\.family sd15 expects a DDPM-style scheduler .*PNDMScheduler"),
    ("flow scheduler in a UNet family", "sd15", SD15, FLOW, None,
     r"names 'FlowMatchEulerDiscreteScheduler'; model\.family sd15 expects a DDPM-style scheduler"),
    ("DDPM scheduler in a flow family", "sd3", SD35, PNDM, None,
     r"names 'PNDMScheduler'; model\.family sd3 expects a flow-match scheduler: one of "
     r"FlowMatchEulerDiscreteScheduler, FlowMatchHeunDiscreteScheduler$"),
    ("only fp16 variant weights", "sd15", SD15, PNDM, ("diffusion_pytorch_model.fp16.safetensors",),
     r"unet/ holds only fp16 variant weights \(diffusion_pytorch_model\.fp16\.safetensors\); set model\.variant: fp16$"),
    ("no weights", "sd15", SD15, PNDM, (), r"unet/ has no weights \(\*\.safetensors or \*\.bin\)$"),
])
def test_a_folder_that_cannot_run_is_refused_naming_the_file(tmp_path, case, family, index, scheduler, weights,
                                                             message):
    folder = layout(tmp_path / "model", index, scheduler,
                    **({} if weights is None else {"weights": weights}))
    with pytest.raises(LayoutError, match=rf"^model\.path: {tmp_path}/model.*{message}"):
        check_model_folder(str(folder), family)


def test_a_listed_component_without_its_folder_and_a_broken_scheduler_file(tmp_path):
    folder = layout(tmp_path / "model", SD15, PNDM, skip=("feature_extractor",))
    with pytest.raises(LayoutError, match=r"lists feature_extractor \(CLIPImageProcessor\) but .*/feature_extractor/ "
                                          r"is missing$"):
        check_model_folder(str(folder), "sd15")
    (folder / "feature_extractor").mkdir()
    (folder / "scheduler" / "scheduler_config.json").write_text("{not json")
    with pytest.raises(LayoutError, match=r"scheduler/scheduler_config\.json is not valid JSON"):
        check_model_folder(str(folder), "sd15")


def test_the_fp16_variant_is_found_when_asked_for(tmp_path):
    both = ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.fp16.safetensors")
    check_model_folder(str(layout(tmp_path / "a", SD15, PNDM, weights=both)), "sd15", variant="fp16")
    main_only = layout(tmp_path / "b", SD15, PNDM)
    with pytest.raises(LayoutError, match=r"unet/ has no fp16 variant weights \(\*\.fp16\.safetensors\)$"):
        check_model_folder(str(main_only), "sd15", variant="fp16")
    sharded = ("diffusion_pytorch_model.safetensors.index.json", "diffusion_pytorch_model-00001-of-00002.safetensors")
    check_model_folder(str(layout(tmp_path / "c", SD15, PNDM, weights=sharded)), "sd15")


def test_a_resolution_the_vae_or_the_patches_cannot_take_is_refused(tmp_path):
    from rewardloop.models.layout import check_resolution

    sd35 = layout(tmp_path / "sd35", SD35, FLOW)
    (sd35 / "vae/config.json").write_text(json.dumps({"block_out_channels": [128, 256, 512, 512]}))
    (sd35 / "transformer/config.json").write_text(json.dumps({"patch_size": 2}))
    check_resolution(str(sd35), "sd3", 512)
    with pytest.raises(LayoutError, match=r"^generate\.resolution: 520 px is not a multiple of 16 \(the VAE's factor 8 "
                                          r"x the transformer's patch size 2, .*sd35\); e\.g\. 512$"):
        check_resolution(str(sd35), "sd3", 520)
    sd15 = layout(tmp_path / "sd15", SD15, PNDM)
    (sd15 / "vae/config.json").write_text(json.dumps({"block_out_channels": [128, 256, 512, 512]}))
    check_resolution(str(sd15), "sd15", 520)  # 65 latents: a UNet takes any size
    (sd15 / "vae/config.json").write_text(json.dumps({"block_out_channels": [32, 64, 64]}))  # the tiny model's
    check_resolution(str(sd15), "sd15", 36)
    with pytest.raises(LayoutError, match=r"generate\.resolution: 34 px is not a multiple of 4 \(the VAE's factor 4"):
        check_resolution(str(sd15), "sd15", 34)


# --- FLUX.1: its T5 is not optional, schnell takes no guidance, each encoder's token limit ---------

@pytest.fixture(scope="module")
def flux_folders(tmp_path_factory):
    """The tiny FLUX.1-dev (guidance embedding) and FLUX.1-schnell (none) folders, as FluxPipeline saves them."""
    from rewardloop.models.tiny.flux import build_tiny_flux_pipeline

    root = tmp_path_factory.mktemp("flux")
    build_tiny_flux_pipeline(root / "dev", seed=0)
    build_tiny_flux_pipeline(root / "schnell", seed=0, guidance_embeds=False)
    return {"dev": root / "dev", "schnell": root / "schnell"}


def test_a_flux_folder_without_t5_is_refused_naming_it(flux_folders, tmp_path):
    """FLUX's T5 is its text tokens (SD3 may run without T5, FLUX may not): null or absent, it is named."""
    import shutil

    check_model_folder(str(flux_folders["dev"]), "flux")
    check_model_folder(str(flux_folders["schnell"]), "flux")
    for lacking in ("text_encoder_2", "tokenizer_2"):
        broken = tmp_path / lacking
        shutil.copytree(flux_folders["dev"], broken)
        index = json.loads((broken / "model_index.json").read_text())
        index[lacking] = [None, None]
        (broken / "model_index.json").write_text(json.dumps(index))
        with pytest.raises(LayoutError, match=rf"^model\.path: {broken}/model_index\.json lists it as null: component "
                                              rf"'{lacking}', which model\.family flux needs$"):
            check_model_folder(str(broken), "flux")
    both = tmp_path / "no-t5"
    shutil.copytree(flux_folders["dev"], both)
    index = json.loads((both / "model_index.json").read_text())
    index.update(text_encoder_2=[None, None], tokenizer_2=[None, None])  # SD3's way to run without T5
    (both / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(LayoutError, match=r"lists it as null: component 'text_encoder_2', which model\.family flux"):
        check_model_folder(str(both), "flux")


def test_a_schnell_folder_with_guidance_is_refused_naming_the_key_and_the_folder(flux_folders):
    from rewardloop.models.layout import check_guidance

    schnell, dev = str(flux_folders["schnell"]), str(flux_folders["dev"])
    message = (rf"^generate\.guidance_scale: 3\.5, but model\.path {schnell} has no guidance embedding "
               rf"\({schnell}/transformer/config\.json: guidance_embeds false, a FLUX\.1-schnell checkpoint\): schnell "
               r"takes no guidance, so the scale would be silently ignored; set generate\.guidance_scale: 1$")
    with pytest.raises(LayoutError, match=message):
        check_guidance(schnell, "flux", 3.5)
    check_guidance(schnell, "flux", 1.0)  # schnell's own: no guidance
    check_guidance(dev, "flux", 3.5)  # dev embeds the scale
    check_guidance(dev, "flux", 1.0)
    sd35 = layout(flux_folders["schnell"].parent / "sd35", SD35, FLOW)  # CFG families: any scale, config not read
    check_guidance(str(sd35), "sd3", 7.0)


def test_the_config_startup_refuses_schnell_with_guidance(flux_folders):
    """The check runs where the config is validated (rewardloop.config.check_semantics), before any job."""
    from workflow_helpers import ROOT

    from rewardloop.config import load

    def config(folder, scale):
        return load(ROOT / "configs/tiny_sd3_grpo.yaml", {
            "model": {"family": "flux", "path": str(folder), "build_tiny": False},
            "generate": {"guidance_scale": scale}})

    with pytest.raises(LayoutError, match=r"^generate\.guidance_scale: 4\.5, but model\.path .*schnell has no guidance"):
        config(flux_folders["schnell"], 4.5)
    assert config(flux_folders["schnell"], 1.0)["generate"]["guidance_scale"] == 1.0
    assert config(flux_folders["dev"], 4.5)["model"]["family"] == "flux"
    # eval samples at its own scales too: each is checked under its own key
    for evals, key in (({"guidance_scale": 3.5}, r"eval\.guidance_scale: 3\.5"),
                       ({"also_at_guidance": [3.5]}, r"eval\.also_at_guidance: 3\.5")):
        with pytest.raises(LayoutError, match=rf"^{key}, but model\.path .*schnell has no guidance"):
            load(ROOT / "configs/tiny_sd3_grpo.yaml", {
                "model": {"family": "flux", "path": str(flux_folders["schnell"]), "build_tiny": False},
                "generate": {"guidance_scale": 1.0}, "eval": evals})


def test_a_flux_folders_prompt_limits_are_t5s_512_and_clips_77(flux_folders, tmp_path):
    """prompts.too_long counts with the folder's own tokenizers: CLIP's own limit (model_max_length: 77 in the
    published FLUX.1 tokenizer/, 16 in the tiny one) and, for T5, the tokens Flux.t5_tokens encodes:
    FluxPipeline's 512 (family.sequence_lengths), or the T5 tokenizer's own model_max_length where it is lower
    (the pretrained tiny FLUX's 16)."""
    import shutil

    from rewardloop.models.families import get_family
    from rewardloop.models.prompt_lengths import tokenizers

    assert get_family("flux").sequence_lengths == {"tokenizer_2": 512}
    tiny = tokenizers({"family": "flux", "path": str(flux_folders["dev"])})
    assert {name: limit for name, (_, limit) in tiny.items()} == {"tokenizer": 16, "tokenizer_2": 512}
    published = tmp_path / "published"  # the tiny folder with FLUX.1-dev's tokenizer limits
    shutil.copytree(flux_folders["dev"], published)
    for name, limit in (("tokenizer", 77), ("tokenizer_2", 256)):  # T5's own 256: what is encoded, and counted
        config_file = published / name / "tokenizer_config.json"
        config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "model_max_length": limit}))
    found = tokenizers({"family": "flux", "path": str(published)})
    assert {name: limit for name, (_, limit) in found.items()} == {"tokenizer": 77, "tokenizer_2": 256}
    clip, t5 = found["tokenizer"][0], found["tokenizer_2"][0]
    assert type(t5).__name__.startswith("T5") and type(clip).__name__.startswith("CLIP")
    assert clip.model_max_length == 77 and t5.model_max_length == 256
