"""A --configfile overlay that runs one short iteration of a recipe on a tiny replica of its family.

    rewardloop smoke-overlay --recipe configs/sd15_pickscore_dpo.yaml --out smoke/sd15_pickscore_dpo
    snakemake --cores 2 --configfile configs/sd15_pickscore_dpo.yaml smoke/sd15_pickscore_dpo/overlay.yaml

Everything the recipe names but this machine lacks is swapped for a stand-in in the same on-disk
format: the model for a ``--size tiny`` replica of the family's published checkpoint (PNDM, Euler
or flow-match scheduler, fp16 variants, T5 and all; models/replicas.py), each reward model for a
tiny random one (smoke/standins.py), the prompt files for their first few prompts. What the
recipe chose stays: its objective and options, its rewards and weights, mixed precision, the
adapter (full fine-tuning included), the sampler settings but their sizes. Only sizes shrink
(``SMOKE`` below), so the run takes a minute on a CPU and tests the recipe's plumbing, not its
learning.
"""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
PROMPTS = {"train": 4, "eval": 2}  # prompts kept from the recipe's files
SMOKE = {  # the sizes an overlay sets (deep-merged over the recipe)
    "iterations": 1,
    "generate": {"prompts_per_iteration": 2, "images_per_prompt": 3, "steps": 4, "resolution": 64,
                 "batch_size": 6, "shards": 1},
    "train": {"steps": 2, "batch_size": 2, "gradient_accumulation_steps": 1, "checkpointing_steps": 1,
              "lr_warmup_steps": 0, "dataloader_num_workers": 0,
              "num_processes": None},  # one process per GPU of the job: one on the CPU (a recipe's 8 need 8 GPUs)
    "eval": {"seeds": [0], "steps": 4},
    "data": {"offline_pairs": None},
    "resources": {"threads": 1, "mem_mb": 4000, "runtime": 30},
}
SMOKE_SDE = {"num_sde_steps": 2, "window_range": [0, 4]}  # recorded steps of a 4-step rollout
# A random replica renders no text, so OCR scores every image 0 and a group objective refuses an
# iteration whose groups are all tied: a faint model-free reward breaks the ties (the OCR reward
# still runs and is logged as reward_ocr).
CONSTANT_ON_NOISE = {"ocr"}
TIE_BREAKER = {"jpeg_compressibility": 1.0e-3}


def recipe_config(recipe: Path, root: Path = REPO) -> dict:
    """The recipe merged over config.yaml, as Snakemake merges them (its null rewards dropped)."""
    from rewardloop.config import deep_merge

    base = yaml.safe_load((root / "config.yaml").read_text())
    merged = deep_merge(base, yaml.safe_load(Path(recipe).read_text()) or {})
    for section in (merged, merged.get("eval") or {}):
        if isinstance(section.get("rewards"), dict):
            section["rewards"] = {k: v for k, v in section["rewards"].items() if v is not None}
    return merged


def replica_folder(family: str, assets: Path, size: str = "tiny", variant: str | None = None) -> Path:
    """Where :func:`replica` keeps the family's replica of ``size`` (of ``variant``) under ``assets``."""
    return Path(assets) / (f"replica-{family}" + (f"-{variant}" if variant else "") + ("" if size == "tiny" else f"-{size}"))


def replica(family: str, assets: Path, size: str = "tiny", variant: str | None = None, device: str = "cpu") -> Path:
    """The family's replica of ``size`` under ``assets`` (built once, its weights drawn on ``device``): of
    ``variant`` (a published checkpoint of the family, e.g. flux schnell), else the family's default one."""
    from rewardloop.models.replicas import build_replica

    folder = replica_folder(family, assets, size, variant)
    if not (folder / "model_index.json").is_file():
        build_replica(family, folder, size=size, seed=0, variant=variant, device=device)
    return folder


def first_prompts(path: str, count: int, out: Path, root: Path) -> str:
    """The first ``count`` prompts of a recipe's prompt file (ids kept), written as JSONL at ``out``."""
    import json

    from rewardloop.prompts import load_prompts

    source = Path(path) if Path(path).is_absolute() else root / path
    table = load_prompts(source).head(count)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in zip(table.prompt_id, table.prompt)))
    return str(out)


def write_overlay(recipe, out_dir, assets=None, root: Path = REPO, size: str = "tiny") -> Path:
    """Write ``out_dir/overlay.yaml`` for ``recipe`` (replica and stand-ins under ``assets``, default
    ``out_dir/assets``, reused when present; ``size`` full: a full-size replica, for GPUs); returns its path."""
    from rewardloop.config import deep_merge
    from rewardloop.models.replicas import variant_of
    from rewardloop.objectives import get_objective
    from rewardloop.smoke.standins import build_standin

    out_dir = Path(out_dir).resolve()
    assets = Path(assets).resolve() if assets else out_dir / "assets"
    config = recipe_config(Path(recipe), root)
    family = config["model"]["family"]
    overlay = deep_merge(SMOKE, {
        "model": {"path": str(replica(family, assets, size, variant_of(family, config["model"]["path"]))),
                  "build_tiny": False, "init_lora": None},
        "prompts": {key: first_prompts(config["prompts"][key], count, out_dir / f"prompts_{key}.jsonl", root)
                    for key, count in PROMPTS.items()},
    })
    for section, rewards in (("rewards", config["rewards"]), ("eval", (config["eval"].get("rewards") or {}))):
        options = {name: build_standin(name, assets / "standins" / name) for name in rewards}
        # a reward given as a bare weight becomes a mapping: keep its weight
        options = {name: {**({} if isinstance(rewards[name], dict) else {"weight": rewards[name]}), **value}
                   for name, value in options.items() if value}
        if options:
            overlay = deep_merge(overlay, {"rewards": options} if section == "rewards"
                                 else {"eval": {"rewards": options}})
    if set(config["rewards"]) <= CONSTANT_ON_NOISE:
        overlay = deep_merge(overlay, {"rewards": TIE_BREAKER})
    objective = get_objective(config["train"]["loss"])
    if objective.records_steps:
        overlay["generate"]["sde"] = dict(SMOKE_SDE)
    overlay = deep_merge(overlay, objective.smoke_overlay(deep_merge(config, overlay)))
    path = out_dir / "overlay.yaml"
    out_dir.mkdir(parents=True, exist_ok=True)
    header = (f"# Smoke overlay for {recipe} (rewardloop smoke-overlay): one short iteration on a tiny replica\n"
              f"# and reward stand-ins. Run: snakemake --cores 2 --configfile {recipe} {path}\n")
    path.write_text(header + yaml.safe_dump(overlay, sort_keys=False))
    return path
