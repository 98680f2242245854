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
