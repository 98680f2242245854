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

Under FSDP (train.distributed: fsdp, rewardloop.training.fsdp) each of N GPUs holds 1/N of all of that (the
weights, gradients, optimizer states, a separate reference and extra weight sets are sharded), plus what is
gathered for the block being computed: the two largest blocks' weights (the current one and the one
prefetched) in the compute dtype (bf16 under train.mixed_precision bf16) and, in the backward pass, the
largest block's whole gradients of its trained weights (fp32) before they are reduce-scattered. The second
table gives that per GPU for N = 1, 2, 4, 8 (N = 1: no FSDP, the first table's figure): SDXL's full
fine-tuning (its DPO recipe in bf16 with its reference on the GPUs, sharded: FSDP refuses fp16 and
train.reference_offload), SD3.5 Medium and Large and FLUX.1 with a LoRA (their recipes) and fully fine-tuned (DPO, whose
reference is a frozen copy of the denoiser, sharded too; SFT has none).
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


def plan(recipe: Path, train_overrides: dict | None = None) -> dict:
    from rewardloop.config import complete
    from rewardloop.models.families import get_family
    from rewardloop.objectives import get_objective
    from rewardloop.smoke.overlay import recipe_config

    cfg = complete(recipe_config(recipe))  # the recipe's files (models, prompts) need not be here
    cfg["train"].update(train_overrides or {})
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
    # FSDP: the largest blocks, gathered whole while they compute (see the module's docstring).
    block_params = sorted(fsdp_groups(models[family.denoiser]), reverse=True)[:2]
    gathered_dtype = 2 if train["mixed_precision"] in ("bf16", "fp16") else 4
    block_trained = block_params[0] if train["adapter"] == "none" else trained * block_params[0] / denoiser
    gathered = sum(block_params) * gathered_dtype + block_trained * 4
    return {"recipe": recipe.stem, "family": family.name, "precision": precision, "adapter": train["adapter"],
            "loss": train["loss"], "denoiser_params": denoiser, "trained_params": trained, "generate_gb": generate / GB,
            "train_gb": train_bytes / GB, "reference_gb": reference / GB, "gathered_gb": gathered / GB}


def fsdp_groups(denoiser) -> list[int]:
    """Parameters of each group FSDP gathers at once: a block without the blocks inside it (sharded on their own),
    and the root's remaining ones."""
    from rewardloop.training.fsdp import blocks

    seen, sizes = set(), []
    for group in [*blocks(denoiser), denoiser]:  # innermost first, as they are sharded
        own = [p for p in group.parameters() if id(p) not in seen]
        seen.update(id(p) for p in own)
        sizes.append(sum(p.numel() for p in own))
    return sizes


def fsdp_gb(row: dict, gpus: int) -> float:
    """Per GPU under FSDP over ``gpus``: the sharded training state plus the gathered blocks (one GPU: nothing to
    shard, FSDP is off)."""
    return row["train_gb"] if gpus == 1 else row["train_gb"] / gpus + row["gathered_gb"]


FSDP_GPUS = (1, 2, 4, 8)
# (recipe, train overrides): SDXL full; SD3.5-M/L, FLUX.1 and Qwen-Image with their recipe's LoRA, then fully fine-tuned (DPO).
FSDP_CASES = [("sdxl_pickscore_dpo", {"mixed_precision": "bf16"})] + [
    (recipe, overrides) for recipe in ("sd35m_pickscore_nft", "sd35l_pickscore_nft", "flux_dev_pickscore_grpo",
                                       "qwen_image_pickscore_grpo")
    for overrides in ({"distributed": "fsdp"}, {"adapter": "none", "loss": "dpo"})]


def fsdp_table() -> list[dict]:
    rows = []
    for recipe, overrides in FSDP_CASES:
        # FSDP refuses train.reference_offload (the SDXL recipe's): its reference is sharded instead.
        row = plan(ROOT / "configs" / f"{recipe}.yaml", {"distributed": "fsdp", "reference_offload": False, **overrides})
        rows.append({**row, **{f"gpus_{n}": fsdp_gb(row, n) for n in FSDP_GPUS}})
    return rows


def main() -> None:
    recipes = [p for p in sorted((ROOT / "configs").glob("*.yaml")) if not p.stem.startswith("tiny_")]
    print(f"{'recipe':28} {'family':6} {'precision':9} {'adapter':7} {'trained':>13} {'generate GB':>11} "
          f"{'train GB':>9}   (weights, gradients, optimizer, reference; no activations)")
    for row in map(plan, recipes):
        print(f"{row['recipe']:28} {row['family']:6} {row['precision']:9} {row['adapter']:7} "
              f"{row['trained_params']:>13,} {row['generate_gb']:>11.1f} {row['train_gb']:>9.1f}")
    print(f"\nFSDP (train.distributed: fsdp): train GB per GPU over N GPUs (sharded state + gathered blocks; "
          "no activations)")
    print(f"{'recipe':28} {'adapter':7} {'loss':5} {'trained':>13} " + " ".join(f"{f'N={n}':>7}" for n in FSDP_GPUS))
    for row in fsdp_table():
        print(f"{row['recipe']:28} {row['adapter']:7} {row['loss']:5} {row['trained_params']:>13,} "
              + " ".join(f"{row[f'gpus_{n}']:>7.1f}" for n in FSDP_GPUS))


if __name__ == "__main__":
    main()
