"""Memory per GPU of each recipe's jobs, counted from the published configs (not measured).

For every GPU recipe in configs/: its family's full-size components are built on meta tensors
(nothing allocated) to count parameters, and the recipe's choices decide what each job holds:
- generate / eval: every component in generate.precision (a force_upcast VAE in fp32 under fp16);
- train: the denoiser's weights in fp32 (accelerate autocasts the forward), the trained parameters'
  gradients and optimizer states (AdamW: 2 fp32 values each; Adafactor: counted as 1), the
  reference (a frozen copy of the denoiser with train.adapter none, on the GPU unless
  train.reference_offload; the adapter switched off otherwise) and the objective's extra weight
  sets (NFT's old policy: one more copy of the LoRA). No text encoder is loaded (prompt embeddings
  are cached).
Activations are not included: they grow with batch size and resolution and need a GPU to measure
(bench/gpu_smoke.py prints each stage's measured peak).
Usage: python bench/memory_plan.py
"""

from __future__ import annotations

from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
GB = 1e9


def components(family: str, variant: str | None = None) -> dict[str, torch.nn.Module]:
    """The family's full-size models (denoiser, VAE, text encoders) of its published ``variant`` (default the
    family's first), on the meta device."""
    from rewardloop.models.replicas import _instantiate, replica_files

    files = replica_files(family, "full", variant)
    index = files["model_index.json"]
    models = {}
    with torch.device("meta"):
        for name, (library, cls) in ((k, v) for k, v in index.items() if isinstance(v, list) and v[0]):
            config = files.get(f"{name}/config.json")
            if config is None or name == "safety_checker":
                continue  # schedulers, tokenizers, feature extractors; the safety checker is never loaded
            models[name] = _instantiate(cls, dict(config))
    return models


def lora_parameters(denoiser, lora_cfg) -> int:
    """r * (in + out) for each layer train.lora.targets names (peft's suffix rule), convolutions per kernel."""
    from rewardloop.models.lora import _targeted

    total = 0
    for name, module in denoiser.named_modules():
        if _targeted(name, lora_cfg["targets"]) and hasattr(module, "weight") and module.weight.ndim in (2, 4):
            out_features, in_features = module.weight.shape[:2]
            kernel = module.weight[0, 0].numel() if module.weight.ndim == 4 else 1
            total += lora_cfg["rank"] * (in_features * kernel + out_features)
    return total


def plan(recipe: Path) -> dict:
    from rewardloop.config import complete
    from rewardloop.models.families import get_family
    from rewardloop.objectives import get_objective
    from rewardloop.smoke.overlay import recipe_config

    cfg = complete(recipe_config(recipe))  # the recipe's files (models, prompts) need not be here
    family = get_family(cfg["model"]["family"])
    train = cfg["train"]
    objective = get_objective(train["loss"]).from_config(cfg, 1)  # iteration 1: a "previous" reference exists
    from rewardloop.models.replicas import variant_of

    models = components(family.name, variant_of(family.name, cfg["model"]["path"]))  # SD3.5 Large, FLUX schnell
    count = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    precision = cfg["generate"]["precision"]
    vae_bytes = 4 if precision == "fp16" and models["vae"].config.force_upcast else BYTES[precision]
    generate = sum(n * (vae_bytes if name == "vae" else BYTES[precision]) for name, n in count.items())
    denoiser = count[family.denoiser]
    trained = denoiser if train["adapter"] == "none" else lora_parameters(models[family.denoiser], train["lora"])
    states = 2 if train["optimizer"] == "adamw" else 1
    reference = 0
    if train["adapter"] == "none" and objective.reference() is not None and not train["reference_offload"]:
        reference = denoiser * 4
    extra = len(objective.extra_adapters) * trained * 4
    weights = denoiser * 4 + (0 if train["adapter"] == "none" else trained * 4)
    train_bytes = weights + trained * 4 * (1 + states) + reference + extra
    return {"recipe": recipe.stem, "family": family.name, "precision": precision, "adapter": train["adapter"],
            "denoiser_params": denoiser, "trained_params": trained, "generate_gb": generate / GB,
            "train_gb": train_bytes / GB, "reference_gb": reference / GB}


def main() -> None:
    recipes = [p for p in sorted((ROOT / "configs").glob("*.yaml")) if not p.stem.startswith("tiny_")]
    print(f"{'recipe':28} {'family':6} {'precision':9} {'adapter':7} {'trained':>13} {'generate GB':>11} "
          f"{'train GB':>9}   (weights, gradients, optimizer, reference; no activations)")
    for row in map(plan, recipes):
        print(f"{row['recipe']:28} {row['family']:6} {row['precision']:9} {row['adapter']:7} "
              f"{row['trained_params']:>13,} {row['generate_gb']:>11.1f} {row['train_gb']:>9.1f}")


if __name__ == "__main__":
    main()
