"""The published configs of the model families and their variants, as plain dicts (full size).

Every dict is the JSON file of the published diffusers checkpoint, key for key and in the file's
own key order (``rewardloop.models.replicas`` writes them back verbatim):

* sd15: ``stable-diffusion-v1-5/stable-diffusion-v1-5`` (the re-host of ``runwayml/stable-diffusion-v1-5``).
  Source: the GitHub mirror of the hub repository's git history ``HDRJ-One/runwayml-stable-diffusion-v1-5``
  (HEAD 5fa07f3 "Update README.md", after "Add non_ema weights as variant (#170)"), file by file.
* sdxl: ``stabilityai/stable-diffusion-xl-base-1.0``. Source: the GitHub mirror of its history
  ``andrewcchoi/stabilityai-stable-diffusion-xl-base-1.0`` (HEAD bf71498, 2023-08-04
  "Update model_index.json"), file by file.
* sd3: ``stabilityai/stable-diffusion-3.5-medium`` (gated: no verbatim mirror was found). The
  transformer, VAE and model index are cross-checked against public code that reproduces them to
  avoid the gate (``tenstorrent/tt-forge-models`` ``stable_diffusion_3_5_fp8/pytorch/src/model_utils.py``)
  and the model card; the text encoders and tokenizers are SD3's (the HF SD3.5 release blog: "the
  text encoders, VAE, and noise scheduler stay exactly the same as in SD3 Medium"), whose values are
  those of SDXL's CLIP encoders (above) and of google/t5-v1_1-xxl. Comments mark the values that
  are reconstructed rather than read from a copy of the file.
* sd3 variants large and large-turbo: ``stabilityai/stable-diffusion-3.5-large`` (-turbo), gated; from the
  hub mirror ``frankjoshua/stable-diffusion-3.5-large`` (file pages and tree listings with byte sizes).
* flux: ``black-forest-labs/FLUX.1-dev`` (gated; the default variant) and ``black-forest-labs/FLUX.1-schnell``
  (Apache-2.0): the schnell repository's own file pages, hub mirrors of both at their diffusers commits
  (768d12a, 01aa605) and verbatim copies, each dict checked against the byte size the hub tree lists.

``VARIANTS[family]`` lists a family's published checkpoints (the first is the default, the one
PUBLISHED_FILES / WEIGHTS / PUBLISHED_REPOS hold): repo, files, weights and, where a model card gives
them, the sampling settings.

``PUBLISHED_FILES[family]`` maps each JSON file's path in the checkpoint folder to its dict;
``WEIGHTS[family]`` says how each component's weights are stored (file stem, dtype, fp16 variant,
shards); ``PARAMETERS`` holds parameter counts with their sources and ``LFS_SIZES`` the byte
sizes of the published weight files (from the git-LFS pointers in the mirrors above), against
which the full-size configs are checked.
"""

from __future__ import annotations

_DOWN_ENCODER = ["DownEncoderBlock2D"] * 4
_UP_DECODER = ["UpDecoderBlock2D"] * 4

# ---------------------------------------------------------------------------------------------
# SD1.5 (HDRJ-One/runwayml-stable-diffusion-v1-5 @ 5fa07f3: the hub repo's files, verbatim)
# ---------------------------------------------------------------------------------------------

# model_index.json ("Fix deprecation warning by changing CLIPFeatureExtractor to CLIPImageProcessor (#124)").
SD15_MODEL_INDEX = {
    "_class_name": "StableDiffusionPipeline",
    "_diffusers_version": "0.6.0",
    "feature_extractor": ["transformers", "CLIPImageProcessor"],
    "safety_checker": ["stable_diffusion", "StableDiffusionSafetyChecker"],
    "scheduler": ["diffusers", "PNDMScheduler"],
    "text_encoder": ["transformers", "CLIPTextModel"],
    "tokenizer": ["transformers", "CLIPTokenizer"],
    "unet": ["diffusers", "UNet2DConditionModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}
# scheduler/scheduler_config.json (also diffusers' docs, "Load schedulers"; key order as in the file).
SD15_SCHEDULER = {
    "_class_name": "PNDMScheduler",
    "_diffusers_version": "0.6.0",
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "num_train_timesteps": 1000,
    "set_alpha_to_one": False,
    "skip_prk_steps": True,
    "steps_offset": 1,
    "trained_betas": None,
    "clip_sample": False,
}
# unet/config.json ("Update unet/config.json (#14)").
SD15_UNET = {
    "_class_name": "UNet2DConditionModel",
    "_diffusers_version": "0.6.0",
    "act_fn": "silu",
    "attention_head_dim": 8,
    "block_out_channels": [320, 640, 1280, 1280],
    "center_input_sample": False,
    "cross_attention_dim": 768,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "downsample_padding": 1,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "in_channels": 4,
    "layers_per_block": 2,
    "mid_block_scale_factor": 1,
    "norm_eps": 1e-05,
    "norm_num_groups": 32,
    "out_channels": 4,
    "sample_size": 64,
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
}
# vae/config.json. The file has no scaling_factor (nor force_upcast): diffusers' defaults
# (0.18215, True) apply, which are SD1.5's values.
SD15_VAE = {
    "_class_name": "AutoencoderKL",
    "_diffusers_version": "0.6.0",
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": _DOWN_ENCODER,
    "in_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 512,
    "up_block_types": _UP_DECODER,
}
# text_encoder/config.json: CLIP ViT-L/14's text tower (openai/clip-vit-large-patch14).
SD15_TEXT_ENCODER = {
    "_name_or_path": "openai/clip-vit-large-patch14",
    "architectures": ["CLIPTextModel"],
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "dropout": 0.0,
    "eos_token_id": 2,
    "hidden_act": "quick_gelu",
    "hidden_size": 768,
    "initializer_factor": 1.0,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 77,
    "model_type": "clip_text_model",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 1,
    "projection_dim": 768,
    "torch_dtype": "float32",
    "transformers_version": "4.22.0.dev0",
    "vocab_size": 49408,
}


def _added_token(content: str, typed: bool = True) -> dict:
    """A special token as the 2022-era tokenizer files spell it."""
    token = {"content": content, "lstrip": False, "normalized": True, "rstrip": False, "single_word": False}
    return {"__type": "AddedToken", **token} if typed else token


BOS, EOS = "<|startoftext|>", "<|endoftext|>"
# tokenizer/tokenizer_config.json and tokenizer/special_tokens_map.json.
SD15_TOKENIZER_CONFIG = {
    "add_prefix_space": False,
    "bos_token": _added_token(BOS),
    "do_lower_case": True,
    "eos_token": _added_token(EOS),
    "errors": "replace",
    "model_max_length": 77,
    "name_or_path": "openai/clip-vit-large-patch14",
    "pad_token": EOS,
    "special_tokens_map_file": "./special_tokens_map.json",
    "tokenizer_class": "CLIPTokenizer",
    "unk_token": _added_token(EOS),
}
SD15_SPECIAL_TOKENS_MAP = {
    "bos_token": _added_token(BOS, typed=False),
    "eos_token": _added_token(EOS, typed=False),
    "pad_token": EOS,
    "unk_token": _added_token(EOS, typed=False),
}
# feature_extractor/preprocessor_config.json.
SD15_FEATURE_EXTRACTOR = {
    "crop_size": 224,
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_resize": True,
    "feature_extractor_type": "CLIPFeatureExtractor",
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "resample": 3,
    "size": 224,
}
# safety_checker/config.json (CompVis/stable-diffusion-safety-checker: a CLIP ViT-L/14). The file
# spells out every generic PretrainedConfig key of transformers 4.22 in both sub-configs; they
# are shared here (_GENERIC), the rest is per sub-config, and the merged dicts keep the file's
# (sorted) key order.
_GENERIC = {
    "_name_or_path": "", "add_cross_attention": False, "architectures": None, "attention_dropout": 0.0,
    "bad_words_ids": None, "chunk_size_feed_forward": 0, "cross_attention_hidden_size": None,
    "decoder_start_token_id": None, "diversity_penalty": 0.0, "do_sample": False, "dropout": 0.0,
    "early_stopping": False, "encoder_no_repeat_ngram_size": 0, "exponential_decay_length_penalty": None,
    "finetuning_task": None, "forced_bos_token_id": None, "forced_eos_token_id": None, "hidden_act": "quick_gelu",
    "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "initializer_factor": 1.0, "initializer_range": 0.02,
    "is_decoder": False, "is_encoder_decoder": False, "label2id": {"LABEL_0": 0, "LABEL_1": 1},
    "layer_norm_eps": 1e-05, "length_penalty": 1.0, "max_length": 20, "min_length": 0, "no_repeat_ngram_size": 0,
    "num_beam_groups": 1, "num_beams": 1, "num_return_sequences": 1, "output_attentions": False,
    "output_hidden_states": False, "output_scores": False, "prefix": None, "problem_type": None, "pruned_heads": {},
    "remove_invalid_values": False, "repetition_penalty": 1.0, "return_dict": True, "return_dict_in_generate": False,
    "sep_token_id": None, "task_specific_params": None, "temperature": 1.0, "tf_legacy_loss": False,
    "tie_encoder_decoder": False, "tie_word_embeddings": True, "tokenizer_class": None, "top_k": 50, "top_p": 1.0,
    "torch_dtype": None, "torchscript": False, "transformers_version": "4.22.0.dev0", "typical_p": 1.0,
    "use_bfloat16": False,
}
SD15_SAFETY_CHECKER = {
    "_commit_hash": "4bb648a606ef040e7685bde262611766a5fdd67b",
    "_name_or_path": "CompVis/stable-diffusion-safety-checker",
    "architectures": ["StableDiffusionSafetyChecker"],
    "initializer_factor": 1.0,
    "logit_scale_init_value": 2.6592,
    "model_type": "clip",
    "projection_dim": 768,
    "text_config": dict(sorted({
        **_GENERIC, "bos_token_id": 0, "eos_token_id": 2, "hidden_size": 768, "intermediate_size": 3072,
        "max_position_embeddings": 77, "model_type": "clip_text_model", "num_attention_heads": 12,
        "num_hidden_layers": 12, "pad_token_id": 1, "vocab_size": 49408,
    }.items())),
    "text_config_dict": {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
                         "num_hidden_layers": 12},
    "torch_dtype": "float32",
    "transformers_version": None,
    "vision_config": dict(sorted({
        **_GENERIC, "bos_token_id": None, "eos_token_id": None, "hidden_size": 1024, "image_size": 224,
        "intermediate_size": 4096, "model_type": "clip_vision_model", "num_attention_heads": 16, "num_channels": 3,
        "num_hidden_layers": 24, "pad_token_id": None, "patch_size": 14,
    }.items())),
    "vision_config_dict": {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16,
                           "num_hidden_layers": 24, "patch_size": 14},
}

# ---------------------------------------------------------------------------------------------
# SDXL base 1.0 (andrewcchoi/stabilityai-stable-diffusion-xl-base-1.0 @ bf71498, verbatim)
# ---------------------------------------------------------------------------------------------

SDXL_MODEL_INDEX = {
    "_class_name": "StableDiffusionXLPipeline",
    "_diffusers_version": "0.19.0.dev0",
    "force_zeros_for_empty_prompt": True,
    "add_watermarker": None,
    "scheduler": ["diffusers", "EulerDiscreteScheduler"],
    "text_encoder": ["transformers", "CLIPTextModel"],
    "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
    "tokenizer": ["transformers", "CLIPTokenizer"],
    "tokenizer_2": ["transformers", "CLIPTokenizer"],
    "unet": ["diffusers", "UNet2DConditionModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}
SDXL_SCHEDULER = {
    "_class_name": "EulerDiscreteScheduler",
    "_diffusers_version": "0.19.0.dev0",
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "clip_sample": False,
    "interpolation_type": "linear",
    "num_train_timesteps": 1000,
    "prediction_type": "epsilon",
    "sample_max_value": 1.0,
    "set_alpha_to_one": False,
    "skip_prk_steps": True,
    "steps_offset": 1,
    "timestep_spacing": "leading",
    "trained_betas": None,
    "use_karras_sigmas": False,
}
SDXL_UNET = {
    "_class_name": "UNet2DConditionModel",
    "_diffusers_version": "0.19.0.dev0",
    "act_fn": "silu",
    "addition_embed_type": "text_time",
    "addition_embed_type_num_heads": 64,
    "addition_time_embed_dim": 256,
    "attention_head_dim": [5, 10, 20],
    "block_out_channels": [320, 640, 1280],
    "center_input_sample": False,
    "class_embed_type": None,
    "class_embeddings_concat": False,
    "conv_in_kernel": 3,
    "conv_out_kernel": 3,
    "cross_attention_dim": 2048,
    "cross_attention_norm": None,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "downsample_padding": 1,
    "dual_cross_attention": False,
    "encoder_hid_dim": None,
    "encoder_hid_dim_type": None,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "in_channels": 4,
    "layers_per_block": 2,
    "mid_block_only_cross_attention": None,
    "mid_block_scale_factor": 1,
    "mid_block_type": "UNetMidBlock2DCrossAttn",
    "norm_eps": 1e-05,
    "norm_num_groups": 32,
    "num_attention_heads": None,
    "num_class_embeds": None,
    "only_cross_attention": False,
    "out_channels": 4,
    "projection_class_embeddings_input_dim": 2816,  # 6 time ids x 256 + text_encoder_2's 1280 pooled
    "resnet_out_scale_factor": 1.0,
    "resnet_skip_time_act": False,
    "resnet_time_scale_shift": "default",
    "sample_size": 128,
    "time_cond_proj_dim": None,
    "time_embedding_act_fn": None,
    "time_embedding_dim": None,
    "time_embedding_type": "positional",
    "timestep_post_act": None,
    "transformer_layers_per_block": [1, 2, 10],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "upcast_attention": None,
    "use_linear_projection": True,
}
# vae/config.json ("[Diffusers] Re-instate 0.9 VAE as default VAE (#30)", then "Update vae/config.json").
SDXL_VAE = {
    "_class_name": "AutoencoderKL",
    "_diffusers_version": "0.20.0.dev0",
    "_name_or_path": "../sdxl-vae/",
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": _DOWN_ENCODER,
    "force_upcast": True,
    "in_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 1024,
    "scaling_factor": 0.13025,
    "up_block_types": _UP_DECODER,
}
# text_encoder/config.json: CLIP ViT-L/14's text tower again (the config says float16; the main
# model.safetensors is float32 all the same, by its LFS size).
SDXL_TEXT_ENCODER = {
    "architectures": ["CLIPTextModel"],
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "dropout": 0.0,
    "eos_token_id": 2,
    "hidden_act": "quick_gelu",
    "hidden_size": 768,
    "initializer_factor": 1.0,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 77,
    "model_type": "clip_text_model",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 1,
    "projection_dim": 768,
    "torch_dtype": "float16",
    "transformers_version": "4.32.0.dev0",
    "vocab_size": 49408,
}
# text_encoder_2/config.json: OpenCLIP ViT-bigG/14's text tower with its projection.
SDXL_TEXT_ENCODER_2 = {
    "architectures": ["CLIPTextModelWithProjection"],
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "dropout": 0.0,
    "eos_token_id": 2,
    "hidden_act": "gelu",
    "hidden_size": 1280,
    "initializer_factor": 1.0,
    "initializer_range": 0.02,
    "intermediate_size": 5120,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 77,
    "model_type": "clip_text_model",
    "num_attention_heads": 20,
    "num_hidden_layers": 32,
    "pad_token_id": 1,
    "projection_dim": 1280,
    "torch_dtype": "float16",
    "transformers_version": "4.32.0.dev0",
    "vocab_size": 49408,
}
# tokenizer/ and tokenizer_2/: the same vocab.json and merges.txt as SD1.5 (same git blobs);
# tokenizer_2 pads with "!" (OpenCLIP's pad id 0).
SDXL_TOKENIZER_CONFIG = {
    "add_prefix_space": False,
    "bos_token": _added_token(BOS),
    "clean_up_tokenization_spaces": True,
    "do_lower_case": True,
    "eos_token": _added_token(EOS),
    "errors": "replace",
    "model_max_length": 77,
    "pad_token": EOS,
    "tokenizer_class": "CLIPTokenizer",
    "unk_token": _added_token(EOS),
}
SDXL_SPECIAL_TOKENS_MAP = SD15_SPECIAL_TOKENS_MAP
SDXL_TOKENIZER_2_CONFIG = {**SDXL_TOKENIZER_CONFIG, "pad_token": "!"}
SDXL_SPECIAL_TOKENS_MAP_2 = {**SD15_SPECIAL_TOKENS_MAP, "pad_token": "!"}

# ---------------------------------------------------------------------------------------------
# SD3.5 Medium (stabilityai/stable-diffusion-3.5-medium; gated, see the module docstring)
# ---------------------------------------------------------------------------------------------

# model_index.json: the component table as reproduced by tt-forge-models' model_utils.py, with
# the _diffusers_version of the SD3.5 release (0.31.0.dev0, reconstructed). Written before
# diffusers 0.32 added the optional image_encoder/feature_extractor to StableDiffusion3Pipeline,
# so it does not list them.
SD3_MODEL_INDEX = {
    "_class_name": "StableDiffusion3Pipeline",
    "_diffusers_version": "0.31.0.dev0",
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "CLIPTextModelWithProjection"],
    "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
    "text_encoder_3": ["transformers", "T5EncoderModel"],
    "tokenizer": ["transformers", "CLIPTokenizer"],
    "tokenizer_2": ["transformers", "CLIPTokenizer"],
    "tokenizer_3": ["transformers", "T5TokenizerFast"],
    "transformer": ["diffusers", "SD3Transformer2DModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}
# scheduler/scheduler_config.json: shift 3.0, static shifting (as this repo's tiny SD3 and SD3
# Medium's file). tt-forge-models' copy adds use_dynamic_shifting=True with base/max shift keys:
# that is its own choice for a single-file load, not SD3.5-M's file, so it is not followed.
SD3_SCHEDULER = {
    "_class_name": "FlowMatchEulerDiscreteScheduler",
    "_diffusers_version": "0.31.0.dev0",
    "num_train_timesteps": 1000,
    "shift": 3.0,
}
# transformer/config.json: tt-forge-models (two loaders) agree key for key; dual attention
# (MMDiT-X) in layers 0..12. The model card says both "dual attention blocks in the first 12
# transformer layers" and "self-attention modules in the first 13 layers": the configs' 13
# indices (0..12) are taken. Extended positional embedding space 384x384 (model card).
SD3_TRANSFORMER = {
    "_class_name": "SD3Transformer2DModel",
    "_diffusers_version": "0.31.0.dev0",
    "attention_head_dim": 64,
    "caption_projection_dim": 1536,
    "dual_attention_layers": list(range(13)),
    "in_channels": 16,
    "joint_attention_dim": 4096,
    "num_attention_heads": 24,
    "num_layers": 24,
    "out_channels": 16,
    "patch_size": 2,
    "pooled_projection_dim": 2048,
    "pos_embed_max_size": 384,
    "qk_norm": "rms_norm",
    "sample_size": 128,
}
# vae/config.json: SD3's 16-channel VAE without quant convs; shift 0.0609, scale 1.5305
# (tt-forge-models; also the latents_mean/std nulls of a saved diffusers SD3 VAE config found in
# public code; _diffusers_version reconstructed).
SD3_VAE = {
    "_class_name": "AutoencoderKL",
    "_diffusers_version": "0.31.0.dev0",
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": _DOWN_ENCODER,
    "force_upcast": True,
    "in_channels": 3,
    "latent_channels": 16,
    "latents_mean": None,
    "latents_std": None,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 1024,
    "scaling_factor": 1.5305,
    "shift_factor": 0.0609,
    "up_block_types": _UP_DECODER,
    "use_post_quant_conv": False,
    "use_quant_conv": False,
}
# text_encoder/ and text_encoder_2/config.json: CLIP-L and OpenCLIP bigG text towers, both with
# projection (SD3 pools both). Values as SDXL's (same encoders); class and transformers_version
# reconstructed.
SD3_TEXT_ENCODER = {**SDXL_TEXT_ENCODER, "architectures": ["CLIPTextModelWithProjection"],
                    "transformers_version": "4.41.2"}
SD3_TEXT_ENCODER_2 = {**SDXL_TEXT_ENCODER_2, "transformers_version": "4.41.2"}
# text_encoder_3/config.json: the encoder of T5 v1.1 XXL (google/t5-v1_1-xxl: d_model 4096,
# d_ff 10240, 64 heads of 64, 24 layers, gated-gelu = gated gelu_new, 32 relative buckets, max
# distance 128; the same numbers in t5x's t5_1_1/xxl.gin and torchtune's t5_v1p1_xxl_encoder) as
# transformers 4.41 saves a T5EncoderModel config (reconstructed key set).
SD3_TEXT_ENCODER_3 = {
    "architectures": ["T5EncoderModel"],
    "classifier_dropout": 0.0,
    "d_ff": 10240,
    "d_kv": 64,
    "d_model": 4096,
    "decoder_start_token_id": 0,
    "dense_act_fn": "gelu_new",
    "dropout_rate": 0.1,
    "eos_token_id": 1,
    "feed_forward_proj": "gated-gelu",
    "initializer_factor": 1.0,
    "is_encoder_decoder": True,
    "is_gated_act": True,
    "layer_norm_epsilon": 1e-06,
    "model_type": "t5",
    "num_decoder_layers": 24,
    "num_heads": 64,
    "num_layers": 24,
    "output_past": True,
    "pad_token_id": 0,
    "relative_attention_max_distance": 128,
    "relative_attention_num_buckets": 32,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.41.2",
    "use_cache": True,
    "vocab_size": 32128,
}
SD3_TOKENIZER_CONFIG = SDXL_TOKENIZER_CONFIG
SD3_SPECIAL_TOKENS_MAP = SD15_SPECIAL_TOKENS_MAP
SD3_TOKENIZER_2_CONFIG = SDXL_TOKENIZER_2_CONFIG
SD3_SPECIAL_TOKENS_MAP_2 = SDXL_SPECIAL_TOKENS_MAP_2
# tokenizer_3/: T5's SentencePiece tokenizer (spiece.model, tokenizer.json, tokenizer_config.json,
# special_tokens_map.json): pad 0, eos 1, unk 2 and 100 sentinels <extra_id_0..99> at the top of
# the vocabulary; model_max_length 512 (the pipeline itself encodes max_sequence_length=256).
# Keys as in the copy of the T5 v1.1 tokenizer_config.json in comfyanonymous/ComfyUI
# (comfy/text_encoders/t5_tokenizer/tokenizer_config.json); added_tokens_decoder and the sentinel
# list depend on the vocabulary and are filled in by rewardloop.models.t5_tokenizer.
SD3_TOKENIZER_3_CONFIG = {
    "clean_up_tokenization_spaces": True,
    "eos_token": "</s>",
    "extra_ids": 100,
    "legacy": False,
    "model_max_length": 512,
    "pad_token": "<pad>",
    "sp_model_kwargs": {},
    "tokenizer_class": "T5Tokenizer",
    "unk_token": "<unk>",
}
T5_SEQUENCE_LENGTH = 256  # StableDiffusion3Pipeline's default max_sequence_length

# ---------------------------------------------------------------------------------------------
# SD3.5 Large and SD3.5 Large Turbo (stabilityai/stable-diffusion-3.5-large, -large-turbo; gated)
# ---------------------------------------------------------------------------------------------
# Source: the hub mirror frankjoshua/stable-diffusion-3.5-large (the release commit 4c4df3f "SD3.5
# Large Public Release" by Dango233, its file pages and tree listings with byte sizes), and the
# model cards. Large and Large Turbo share the architecture (the Turbo card: "an ADD-distilled
# Multimodal Diffusion Transformer"), so one transformer config serves both.

# model_index.json (706 bytes in the tree listing): the same component table as SD3.5 Medium's;
# SD3_MODEL_INDEX written out is 706 bytes too, so it is taken as is.
SD35_LARGE_MODEL_INDEX = SD3_MODEL_INDEX
# scheduler/scheduler_config.json (141 bytes; the mirror's file page, verbatim): static shift 3.0.
SD35_LARGE_SCHEDULER = {
    "_class_name": "FlowMatchEulerDiscreteScheduler",
    "_diffusers_version": "0.29.0.dev0",
    "num_train_timesteps": 1000,
    "shift": 3.0,
}
# transformer/config.json (397 bytes; the mirror's file page, verbatim; the same file in
# TensorStack/stable-diffusion-3.5-medium-onnx's unet/config.json, a mislabelled Large copy): 38
# joint blocks of 38 heads x 64 (width 2432 = caption_projection_dim), QK RMS-norm, a 192x192
# positional-embedding grid, and no dual_attention_layers key (MMDiT, not Medium's MMDiT-X).
SD35_LARGE_TRANSFORMER = {
    "_class_name": "SD3Transformer2DModel",
    "_diffusers_version": "0.31.0.dev0",
    "attention_head_dim": 64,
    "caption_projection_dim": 2432,
    "in_channels": 16,
    "joint_attention_dim": 4096,
    "num_attention_heads": 38,
    "num_layers": 38,
    "out_channels": 16,
    "patch_size": 2,
    "pooled_projection_dim": 2048,
    "pos_embed_max_size": 192,
    "qk_norm": "rms_norm",
    "sample_size": 128,
}
# vae/config.json: 809 bytes in the Large trees (adamo1139/stable-diffusion-3.5-large-ungated; the
# same size as frankjoshua/stable-diffusion-3.5-medium's "vae copy"). A re-save of Large's VAE
# (ariG23498/sd-3.5-merged vae/config.json, from the ceddf0a snapshot) shows the keys: SD3_VAE's plus
# mid_block_add_attention true. The 809 bytes then leave one 35-byte line, taken to be
# "_name_or_path": "../sdxl-vae/" (as in SD3 Medium's diffusers VAE config) - reconstructed, the
# byte size matches.
SD35_LARGE_VAE = dict(sorted({**SD3_VAE, "_name_or_path": "../sdxl-vae/", "mid_block_add_attention": True}.items()))
# Text encoders and tokenizers: SD3's (text_encoder_2/config.json is 570 bytes in the mirror's tree,
# the size of SD3_TEXT_ENCODER_2 written out; text_encoder_3 is cut in the same 4.99 + 4.53 GB shards).

# The Turbo's scheduler file was not found in a public copy: Large's is used (reconstructed). The
# Turbo card samples with num_inference_steps=4 and guidance_scale=0.0 (TURBO_SAMPLING below).
SD35_LARGE_TURBO_SCHEDULER = SD35_LARGE_SCHEDULER
SD35_LARGE_TURBO_SAMPLING = {"num_inference_steps": 4, "guidance_scale": 0.0}

# ---------------------------------------------------------------------------------------------
# FLUX.1-dev and FLUX.1-schnell (black-forest-labs/FLUX.1-dev: gated, non-commercial license;
# black-forest-labs/FLUX.1-schnell: Apache-2.0)
# ---------------------------------------------------------------------------------------------
# Sources. FLUX.1-schnell: the hub repository's own pages (black-forest-labs/FLUX.1-schnell, tree and
# blob pages of refs/pr/24, refs/pr/110, refs/pr/126, all at commit 768d12a "Add diffusers weights
# and configs (#7)" by timudk and dn6) and the hub mirror frankjoshua/FLUX.1-schnell (same commit;
# its commit page lists every file with its line count). FLUX.1-dev: the hub mirror
# frankjoshua/FLUX.1-dev (commit 01aa605 "Add diffusers format weights (#3)", tree listings with
# sizes) and AITRADER/MFLUXUI.1-dev (model_index.json at 01aa605, verbatim), and verbatim copies of
# dev's transformer/config.json (city96/FLUX.1-dev-gguf refs/pr/34 config.json, BestModelsv2/FLUX
# transformer/config.json, both 378 bytes; the MindIE FLUX.1-dev README on GitHub quotes it too).
# Every dict below written as json.dumps(d, indent=2) + "\n" has the byte size the hub tree lists
# for its file (FLUX_CONFIG_SIZES; tests/test_replicas.py checks them).

# model_index.json (536 bytes, both variants; AITRADER/MFLUXUI.1-schnell and MFLUXUI.1-dev, verbatim).
FLUX_MODEL_INDEX = {
    "_class_name": "FluxPipeline",
    "_diffusers_version": "0.30.0.dev0",
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "CLIPTextModel"],
    "text_encoder_2": ["transformers", "T5EncoderModel"],
    "tokenizer": ["transformers", "CLIPTokenizer"],
    "tokenizer_2": ["transformers", "T5TokenizerFast"],
    "transformer": ["diffusers", "FluxTransformer2DModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}
# scheduler/scheduler_config.json. dev (273 bytes): dynamic shifting, mu from the image's token count
# between (256 tokens, 0.5) and (4096, 1.15) (sayakpaul/FLUX.1-merged and fyp1/flux_dev_finetune
# copies, 273 bytes, verbatim; the same values in taproot's FluxScheduler defaults and BFL's
# flux/sampling.py get_schedule: base_shift 0.5, max_shift 1.15). schnell (274 bytes; the hub's
# refs/pr/24 file page, verbatim): static, shift 1.0 (the plain linspace grid).
FLUX_DEV_SCHEDULER = {
    "_class_name": "FlowMatchEulerDiscreteScheduler",
    "_diffusers_version": "0.30.0.dev0",
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 4096,
    "max_shift": 1.15,
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
}
FLUX_SCHNELL_SCHEDULER = {**FLUX_DEV_SCHEDULER, "shift": 1.0, "use_dynamic_shifting": False}
# transformer/config.json. dev (378 bytes, verbatim copies named above): 19 joint ("double-stream")
# and 38 single-stream blocks, 24 heads x 128 = width 3072, 64 input channels (16 latent channels
# in 2x2 patches), T5 width 4096, CLIP pooled 768, a guidance embedding. The file has no
# axes_dims_rope: diffusers' default (16, 56, 56) applies (BFL's flux/util.py flux-dev params:
# axes_dim [16, 56, 56], the same). schnell (321 bytes, 13 lines in 768d12a): the same without
# _name_or_path and with guidance_embeds false (this dict written out is 321 bytes).
FLUX_DEV_TRANSFORMER = {
    "_class_name": "FluxTransformer2DModel",
    "_diffusers_version": "0.30.0.dev0",
    "_name_or_path": "../checkpoints/flux-dev/transformer",
    "attention_head_dim": 128,
    "guidance_embeds": True,
    "in_channels": 64,
    "joint_attention_dim": 4096,
    "num_attention_heads": 24,
    "num_layers": 19,
    "num_single_layers": 38,
    "patch_size": 1,
    "pooled_projection_dim": 768,
}
FLUX_SCHNELL_TRANSFORMER = {k: v for k, v in FLUX_DEV_TRANSFORMER.items() if k != "_name_or_path"}
FLUX_SCHNELL_TRANSFORMER["guidance_embeds"] = False
# vae/config.json. schnell (774 bytes; frankjoshua/FLUX.1-schnell vae/config.json at 768d12a,
# verbatim): 16 latent channels, no quant convs, scaling 0.3611 and shift 0.1159 (BFL's flux/util.py
# ae_params: scale_factor 0.3611, shift_factor 0.1159). dev (820 bytes): the same plus
# "_name_or_path": "../checkpoints/flux-dev" (TechDirty/FullModelCD and ChuckMcSneed/FLUX.1-dev
# copies; the 46-byte line is the size difference).
FLUX_SCHNELL_VAE = {
    "_class_name": "AutoencoderKL",
    "_diffusers_version": "0.30.0.dev0",
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": _DOWN_ENCODER,
    "force_upcast": True,
    "in_channels": 3,
    "latent_channels": 16,
    "latents_mean": None,
    "latents_std": None,
    "layers_per_block": 2,
    "mid_block_add_attention": True,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 1024,
    "scaling_factor": 0.3611,
    "shift_factor": 0.1159,
    "up_block_types": _UP_DECODER,
    "use_post_quant_conv": False,
    "use_quant_conv": False,
}
FLUX_DEV_VAE = {"_class_name": "AutoencoderKL", "_diffusers_version": "0.30.0.dev0",
                "_name_or_path": "../checkpoints/flux-dev",
                **{k: v for k, v in FLUX_SCHNELL_VAE.items() if not k.startswith("_")}}
# text_encoder/config.json (613 bytes, 25 lines): CLIP ViT-L/14's text tower, SD1.5's keys with a
# bfloat16 torch_dtype and transformers 4.43.3 (flux-encoders/text_encoder config.json, 613 bytes,
# verbatim). FluxPipeline reads its pooled output (hidden_size 768 = pooled_projection_dim).
FLUX_TEXT_ENCODER = {**SD15_TEXT_ENCODER, "torch_dtype": "bfloat16", "transformers_version": "4.43.3"}
# text_encoder_2/config.json (782 bytes, 32 lines): T5 v1.1 XXL's encoder, SD3's text_encoder_3 keys
# plus "_name_or_path": "google/t5-v1_1-xxl", bfloat16, transformers 4.43.3 (TechDirty/FullModelCD
# text_encoder_2/config.json, a FLUX.1-dev copy, verbatim; 782 bytes written out).
FLUX_TEXT_ENCODER_2 = {"_name_or_path": "google/t5-v1_1-xxl", **SD3_TEXT_ENCODER_3, "torch_dtype": "bfloat16",
                       "transformers_version": "4.43.3"}
# tokenizer/tokenizer_config.json (705 bytes) and special_tokens_map.json (588 bytes): the CLIP
# tokenizer as transformers 4.43 saves it (added_tokens_decoder; the verbatim files in
# sayakpaul/FLUX.1-merged, yujiepan/FLUX.1-dev-tiny-random and Kameshr/flux-pipeline, byte sizes
# equal to the hub's 768d12a tree).
FLUX_TOKENIZER_CONFIG = {
    "add_prefix_space": False,
    "added_tokens_decoder": {
        "49406": {"content": BOS, "lstrip": False, "normalized": True, "rstrip": False, "single_word": False,
                  "special": True},
        "49407": {"content": EOS, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                  "special": True},
    },
    "bos_token": BOS,
    "clean_up_tokenization_spaces": True,
    "do_lower_case": True,
    "eos_token": EOS,
    "errors": "replace",
    "model_max_length": 77,
    "pad_token": EOS,
    "tokenizer_class": "CLIPTokenizer",
    "unk_token": EOS,
}


def _special(content: str, normalized: bool) -> dict:
    return {"content": content, "lstrip": False, "normalized": normalized, "rstrip": False, "single_word": False}


FLUX_SPECIAL_TOKENS_MAP = {"bos_token": _special(BOS, True), "eos_token": _special(EOS, False),
                           "pad_token": _special(EOS, False), "unk_token": _special(EOS, False)}
# tokenizer_2/: T5's SentencePiece tokenizer (spiece.model, tokenizer.json, tokenizer_config.json of
# 940 lines, special_tokens_map.json of 125 lines in 768d12a). Its tokenizer_config.json was not
# found verbatim: SD3's reconstructed key set is used (model_max_length 512), which writes 939 lines,
# one key fewer than the hub's (probably transformers 4.43's "add_prefix_space": true).
FLUX_TOKENIZER_2_CONFIG = SD3_TOKENIZER_3_CONFIG

# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

PUBLISHED_REPOS = {
    "sd15": "stable-diffusion-v1-5/stable-diffusion-v1-5",
    "sdxl": "stabilityai/stable-diffusion-xl-base-1.0",
    "sd3": "stabilityai/stable-diffusion-3.5-medium",
    "flux": "black-forest-labs/FLUX.1-dev",
}

PUBLISHED_FILES: dict[str, dict[str, dict]] = {
    "sd15": {
        "model_index.json": SD15_MODEL_INDEX,
        "scheduler/scheduler_config.json": SD15_SCHEDULER,
        "unet/config.json": SD15_UNET,
        "vae/config.json": SD15_VAE,
        "text_encoder/config.json": SD15_TEXT_ENCODER,
        "tokenizer/tokenizer_config.json": SD15_TOKENIZER_CONFIG,
        "tokenizer/special_tokens_map.json": SD15_SPECIAL_TOKENS_MAP,
        "safety_checker/config.json": SD15_SAFETY_CHECKER,
        "feature_extractor/preprocessor_config.json": SD15_FEATURE_EXTRACTOR,
    },
    "sdxl": {
        "model_index.json": SDXL_MODEL_INDEX,
        "scheduler/scheduler_config.json": SDXL_SCHEDULER,
        "unet/config.json": SDXL_UNET,
        "vae/config.json": SDXL_VAE,
        "text_encoder/config.json": SDXL_TEXT_ENCODER,
        "text_encoder_2/config.json": SDXL_TEXT_ENCODER_2,
        "tokenizer/tokenizer_config.json": SDXL_TOKENIZER_CONFIG,
        "tokenizer/special_tokens_map.json": SDXL_SPECIAL_TOKENS_MAP,
        "tokenizer_2/tokenizer_config.json": SDXL_TOKENIZER_2_CONFIG,
        "tokenizer_2/special_tokens_map.json": SDXL_SPECIAL_TOKENS_MAP_2,
    },
    "sd3": {
        "model_index.json": SD3_MODEL_INDEX,
        "scheduler/scheduler_config.json": SD3_SCHEDULER,
        "transformer/config.json": SD3_TRANSFORMER,
        "vae/config.json": SD3_VAE,
        "text_encoder/config.json": SD3_TEXT_ENCODER,
        "text_encoder_2/config.json": SD3_TEXT_ENCODER_2,
        "text_encoder_3/config.json": SD3_TEXT_ENCODER_3,
        "tokenizer/tokenizer_config.json": SD3_TOKENIZER_CONFIG,
        "tokenizer/special_tokens_map.json": SD3_SPECIAL_TOKENS_MAP,
        "tokenizer_2/tokenizer_config.json": SD3_TOKENIZER_2_CONFIG,
        "tokenizer_2/special_tokens_map.json": SD3_SPECIAL_TOKENS_MAP_2,
        "tokenizer_3/tokenizer_config.json": SD3_TOKENIZER_3_CONFIG,
    },
    "flux": {
        "model_index.json": FLUX_MODEL_INDEX,
        "scheduler/scheduler_config.json": FLUX_DEV_SCHEDULER,
        "transformer/config.json": FLUX_DEV_TRANSFORMER,
        "vae/config.json": FLUX_DEV_VAE,
        "text_encoder/config.json": FLUX_TEXT_ENCODER,
        "text_encoder_2/config.json": FLUX_TEXT_ENCODER_2,
        "tokenizer/tokenizer_config.json": FLUX_TOKENIZER_CONFIG,
        "tokenizer/special_tokens_map.json": FLUX_SPECIAL_TOKENS_MAP,
        "tokenizer_2/tokenizer_config.json": FLUX_TOKENIZER_2_CONFIG,
    },
}

# How each model component's weights are stored: (weights file stem, dtype of the main file,
# whether an fp16 variant file sits beside it, number of shards). SD1.5 and SDXL: fp32 main files
# with *.fp16.safetensors variants (the mirrors' file lists). SD3.5-M: half precision, no
# variants; T5 in 2 shards (model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json).
# Its dtypes are not confirmed from the gated file list: the transformer in bfloat16 ("the official
# dtype for all 3.5 models is bfloat16", keras-team/keras-hub PR #2033 citing the model card; the
# HF SD3.5 blog: the original checkpoint is bfloat16), the text encoders in float16 as their
# configs say, the VAE in float16 (SD3 Medium's). A full replica written this way has T5 shards of
# 4,994,582,104 + 4,530,066,248 bytes (cut at 5 GB), a 4,939,433,672-byte transformer, a
# 247,323,896-byte text_encoder and a 167,666,654-byte VAE.
WEIGHTS: dict[str, dict[str, tuple[str, str, bool, int]]] = {
    "sd15": {
        "unet": ("diffusion_pytorch_model", "float32", True, 1),
        "vae": ("diffusion_pytorch_model", "float32", True, 1),
        "text_encoder": ("model", "float32", True, 1),
        "safety_checker": ("model", "float32", True, 1),
    },
    "sdxl": {
        "unet": ("diffusion_pytorch_model", "float32", True, 1),
        "vae": ("diffusion_pytorch_model", "float32", True, 1),
        "text_encoder": ("model", "float32", True, 1),
        "text_encoder_2": ("model", "float32", True, 1),
    },
    "sd3": {
        "transformer": ("diffusion_pytorch_model", "bfloat16", False, 1),
        "vae": ("diffusion_pytorch_model", "float16", False, 1),
        "text_encoder": ("model", "float16", False, 1),
        "text_encoder_2": ("model", "float16", False, 1),
        "text_encoder_3": ("model", "float16", False, 2),
    },
    # FLUX.1 (both variants; the hub trees above): the transformer in three shards (dev 9.98 + 9.95 +
    # 3.87 GB, schnell 9.96 + 9.95 + 3.87 GB: diffusers' 10 GB cut), T5 in two (4.99 + 4.53 GB:
    # transformers' 5 GB cut), CLIP (246 MB) and the VAE (168 MB) single files, no variants. All in 16
    # bits by those sizes; bfloat16 as the configs' torch_dtype says and as BFL's original
    # flux1-dev.safetensors is stored (its byte size is 2 x the parameters + a header, FILE_SIZES).
    "flux": {
        "transformer": ("diffusion_pytorch_model", "bfloat16", False, 3),
        "vae": ("diffusion_pytorch_model", "bfloat16", False, 1),
        "text_encoder": ("model", "bfloat16", False, 1),
        "text_encoder_2": ("model", "bfloat16", False, 2),
    },
}

# Parameter counts of full-size components that a source states exactly. SD1.5's UNet and CLIP
# ViT-L/14's text encoder: the figures the issue cites (859,520,964 and 123,060,480; SD1.5's
# model card rounds them to "860M" and "123M"); SDXL's UNet: 2,567,463,684 (the issue; "2.6B" in
# the SDXL paper). Each also fits the byte size of the published fp32 file (LFS_SIZES).
PARAMETERS = {
    ("sd15", "unet"): 859_520_964,
    ("sd15", "text_encoder"): 123_060_480,
    ("sdxl", "unet"): 2_567_463_684,
    ("sdxl", "text_encoder"): 123_060_480,
    # FLUX.1-dev's transformer: 11,901,408,320 (the figure). It fits the byte size of BFL's
    # single-file flux1-dev.safetensors, 23,802,932,552 bytes (the hub's tree API as recorded in public
    # code, e.g. ComfyUI model registries): 2 bytes x 11,901,408,320 + a 115,912-byte header
    # (FILE_SIZES). CLIP-L: SD1.5's text tower, the same 123,060,480.
    ("flux", "transformer"): 11_901_408_320,
    ("flux", "text_encoder"): 123_060_480,
}

# Rounded figures: SD3.5 Medium "At 2.5 billion parameters" (Stability AI's release text, quoted
# by its API hosts). The transformer's weights file holds 2,469,663,936 values (2,243,171,520
# parameters + the 384x384 positional-embedding buffer); with the VAE in 16 bits that is the
# 4.76 GiB of the single-file sd3.5_medium.safetensors listed on model sites.
ROUNDED_PARAMETERS = {("sd3", "transformer"): (2.5e9, 0.05e9)}  # (figure, half the rounding step)

# Byte sizes of the published weight files: the git-LFS pointers ("size N") in the mirrors above.
# A safetensors file is its tensors (parameter count x bytes per element) plus a JSON header of
# some kilobytes, which bounds each component's parameter count from both sides.
LFS_SIZES = {
    "sd15": {
        "unet/diffusion_pytorch_model.safetensors": 3_438_167_540,
        "unet/diffusion_pytorch_model.fp16.safetensors": 1_719_125_304,
        "vae/diffusion_pytorch_model.safetensors": 334_643_276,
        "vae/diffusion_pytorch_model.fp16.safetensors": 167_335_342,
        "text_encoder/model.safetensors": 492_265_874,
        "text_encoder/model.fp16.safetensors": 246_144_864,
        "safety_checker/model.safetensors": 1_215_981_830,
        "safety_checker/model.fp16.safetensors": 608_018_440,
    },
    "sdxl": {
        "unet/diffusion_pytorch_model.safetensors": 10_270_077_736,
        "unet/diffusion_pytorch_model.fp16.safetensors": 5_135_149_760,
        "vae/diffusion_pytorch_model.safetensors": 334_643_268,
        "vae/diffusion_pytorch_model.fp16.safetensors": 167_335_342,
        "text_encoder/model.safetensors": 492_265_168,
        "text_encoder/model.fp16.safetensors": 246_144_152,
        "text_encoder_2/model.safetensors": 2_778_702_264,
        "text_encoder_2/model.fp16.safetensors": 1_389_382_176,
    },
}

# ---------------------------------------------------------------------------------------------
# Variants: the published checkpoints of one family that share its adapter (same pipeline class,
# component table and code path) but differ in configs or sizes. The first is the family's default
# (PUBLISHED_FILES / WEIGHTS / PUBLISHED_REPOS above hold it).
# ---------------------------------------------------------------------------------------------


def _sd35_large(scheduler: dict) -> dict:
    return {**PUBLISHED_FILES["sd3"], "scheduler/scheduler_config.json": scheduler,
            "transformer/config.json": SD35_LARGE_TRANSFORMER, "vae/config.json": SD35_LARGE_VAE}


# SD3.5 Large's storage (frankjoshua/stable-diffusion-3.5-large trees): the transformer in two
# bfloat16 shards (9.99 + 6.31 GB, diffusers' 10 GB cut; its index's total_size 16,292,561,536 =
# 2 x 8,146,280,768 values, adamo1139/stable-diffusion-3.5-large-turbo-ungated), text_encoder_2 as
# model.safetensors and model.fp16.safetensors of 1.39 GB each (both 16-bit), T5 in 4.99 + 4.53 GB
# shards, the VAE a 168 MB file. text_encoder's listing was not found: taken as text_encoder_2's.
_SD35_LARGE_WEIGHTS = {
    "transformer": ("diffusion_pytorch_model", "bfloat16", False, 2),
    "vae": ("diffusion_pytorch_model", "float16", False, 1),
    "text_encoder": ("model", "float16", True, 1),
    "text_encoder_2": ("model", "float16", True, 1),
    "text_encoder_3": ("model", "float16", False, 2),
}

VARIANTS: dict[str, dict[str, dict]] = {
    "sd15": {"v1-5": {"repo": PUBLISHED_REPOS["sd15"], "files": PUBLISHED_FILES["sd15"], "weights": WEIGHTS["sd15"]}},
    "sdxl": {"base-1.0": {"repo": PUBLISHED_REPOS["sdxl"], "files": PUBLISHED_FILES["sdxl"],
                          "weights": WEIGHTS["sdxl"]}},
    "sd3": {
        "medium": {"repo": PUBLISHED_REPOS["sd3"], "files": PUBLISHED_FILES["sd3"], "weights": WEIGHTS["sd3"]},
        "large": {"repo": "stabilityai/stable-diffusion-3.5-large", "files": _sd35_large(SD35_LARGE_SCHEDULER),
                  "weights": _SD35_LARGE_WEIGHTS},
        "large-turbo": {"repo": "stabilityai/stable-diffusion-3.5-large-turbo",
                        "files": _sd35_large(SD35_LARGE_TURBO_SCHEDULER), "weights": _SD35_LARGE_WEIGHTS,
                        "sampling": SD35_LARGE_TURBO_SAMPLING},
    },
    "flux": {
        "dev": {"repo": PUBLISHED_REPOS["flux"], "files": PUBLISHED_FILES["flux"], "weights": WEIGHTS["flux"],
                # the model card and FluxPipeline's docs: 50 steps at guidance 3.5; T5 at 512 tokens
                "sampling": {"num_inference_steps": 50, "guidance_scale": 3.5, "max_sequence_length": 512}},
        "schnell": {
            "repo": "black-forest-labs/FLUX.1-schnell",
            "files": {**PUBLISHED_FILES["flux"], "scheduler/scheduler_config.json": FLUX_SCHNELL_SCHEDULER,
                      "transformer/config.json": FLUX_SCHNELL_TRANSFORMER, "vae/config.json": FLUX_SCHNELL_VAE},
            "weights": WEIGHTS["flux"],
            # the schnell model card's diffusers example: 4 steps, guidance 0, max_sequence_length 256
            "sampling": {"num_inference_steps": 4, "guidance_scale": 0.0, "max_sequence_length": 256},
        },
    },
}

# Parameter counts per variant (the defaults' are in PARAMETERS too). FLUX.1-schnell: dev's less the
# guidance embedder (Linear 256->3072 and 3072->3072 with biases: 10,229,760); its BFL single file
# flux1-schnell.safetensors is 23,782,506,688 bytes (the hub's tree API, as recorded in public code):
# 2 x 11,891,178,560 + a 149,568-byte header. SD3.5 Large (and Turbo): "8.1 billion parameters"
# (Stability AI's release text and model card); exactly 8,056,627,520, plus the 192 x 192 x 2432
# positional-embedding buffer = the 8,146,280,768 values of the published shard index. The FLUX VAE:
# 83,819,683 (BFL's fp32 ae.safetensors, 335,304,388 bytes = 4 x that + a 25,656-byte header).
VARIANT_PARAMETERS = {
    ("flux", "dev", "transformer"): 11_901_408_320,
    ("flux", "schnell", "transformer"): 11_891_178_560,
    ("flux", "dev", "text_encoder"): 123_060_480,
    ("flux", "schnell", "text_encoder"): 123_060_480,
    ("flux", "dev", "vae"): 83_819_683,
    ("flux", "schnell", "vae"): 83_819_683,
    ("sd3", "large", "transformer"): 8_056_627_520,
    ("sd3", "large-turbo", "transformer"): 8_056_627_520,
}
VARIANT_ROUNDED_PARAMETERS = {("sd3", "large", "transformer"): (8.1e9, 0.05e9),
                              ("sd3", "large-turbo", "transformer"): (8.1e9, 0.05e9),
                              ("flux", "dev", "transformer"): (12e9, 0.5e9),  # "12 billion parameter" (cards)
                              ("flux", "schnell", "transformer"): (12e9, 0.5e9)}

# Byte sizes of published single weight files that hold one component, with the bytes per stored
# value: (family, variant, component) -> (file, bytes, bytes per value). BFL's original
# flux1-*.safetensors and ae.safetensors (the hub tree API sizes recorded in public code: ComfyUI
# model registries and installers), and the SD3.5 Large transformer shards' index total_size.
FILE_SIZES = {
    ("flux", "dev", "transformer"): ("flux1-dev.safetensors", 23_802_932_552, 2),
    ("flux", "schnell", "transformer"): ("flux1-schnell.safetensors", 23_782_506_688, 2),
    ("flux", "dev", "vae"): ("ae.safetensors", 335_304_388, 4),
}
# (family, variant, component) -> total_size of the published shard index (no header: exact).
INDEX_TOTAL_SIZES = {("sd3", "large-turbo", "transformer"): 16_292_561_536}

# Byte sizes of the published JSON files where no copy of the file was at hand but the hub tree
# lists the size: every dict above written out must have it.
FLUX_CONFIG_SIZES = {
    "dev": {"model_index.json": 536, "scheduler/scheduler_config.json": 273, "transformer/config.json": 378,
            "vae/config.json": 820, "text_encoder/config.json": 613, "text_encoder_2/config.json": 782,
            "tokenizer/tokenizer_config.json": 705, "tokenizer/special_tokens_map.json": 588},
    "schnell": {"model_index.json": 536, "scheduler/scheduler_config.json": 274, "transformer/config.json": 321,
                "vae/config.json": 774, "text_encoder/config.json": 613, "text_encoder_2/config.json": 782,
                "tokenizer/tokenizer_config.json": 705, "tokenizer/special_tokens_map.json": 588},
}
SD35_LARGE_CONFIG_SIZES = {"model_index.json": 706, "scheduler/scheduler_config.json": 141,
                           "transformer/config.json": 397, "vae/config.json": 809,
                           "text_encoder_2/config.json": 570}

# The git blob ids of the published CLIP vocabulary files, identical in SD1.5's tokenizer/ and
# SDXL's tokenizer/ and tokenizer_2/ (git ls-tree of both mirrors): the files written from
# open_clip's BPE merges must hash to these.
CLIP_VOCAB_GIT_BLOB = "469be27c5c010538f845f518c4f5e8574c78f7c8"  # vocab.json, 1,059,962 bytes
CLIP_MERGES_GIT_BLOB = "76e821f1b6f0a9709293c3b6b51ed90980b3166b"  # merges.txt, 524,619 bytes

# The git blob ids of the published JSON files (git ls-tree of the mirrors above): a config
# written as json.dumps(d, indent=2) + "\n" from the dicts above reproduces each file byte for byte.
CONFIG_GIT_BLOBS = {
    "sd15": {
        "feature_extractor/preprocessor_config.json": "5294955ff7801083f720b34b55d0f1f51313c5c5",
        "model_index.json": "daf7e2e2dfc64fb437a2b44525667111b00cb9fc",
        "safety_checker/config.json": "5dbd88952e7e521aa665e5052e6db7def3641d03",
        "scheduler/scheduler_config.json": "82d05b0e688d7ea94675678646c427907419346e",
        "text_encoder/config.json": "4d3e873ab5086ad989f407abd50fdce66db8d657",
        "tokenizer/special_tokens_map.json": "2c2130b544c0c5a72d5d00da071ba130a9800fb2",
        "tokenizer/tokenizer_config.json": "5ba7bf706515bc60487ad0e1816b4929b82542d6",
        "unet/config.json": "1a02ee8abc93e840ffbcb2d68b66ccbcb74b3ab3",
        "vae/config.json": "55d78924fee13e4220f24320127c5f16284e13b9",
    },
    "sdxl": {
        "model_index.json": "6cc5138ddb67e9309c9b4e058e33e52087f1d215",
        "scheduler/scheduler_config.json": "e5bc8421e047838523be7acfb6720f167f7382f6",
        "text_encoder/config.json": "cde352ada4bb95fdad2fc503b8121257cef215a6",
        "text_encoder_2/config.json": "da1848b5ed17b676f021578838f12c4023b86379",
        "tokenizer/special_tokens_map.json": "2c2130b544c0c5a72d5d00da071ba130a9800fb2",
        "tokenizer/tokenizer_config.json": "2e8612a429492973fe60635b3f44a28b065cfac0",
        "tokenizer_2/special_tokens_map.json": "ae0c5be6f35217e51c4c000fd325d8de0294e99c",
        "tokenizer_2/tokenizer_config.json": "a8438e020c4497a429240d6b89e0bf9a6e2ffa92",
        "unet/config.json": "c8714c90f0e2409156da42781954416cb7df36af",
        "vae/config.json": "a66a171ba7c8efb1a8fc3bdc64e65318eade8e13",
    },
}
