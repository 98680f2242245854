"""LoRA adapters on the denoiser: attach (peft), load from and save to the diffusers format.

The saved file is ``pytorch_lora_weights.safetensors`` in the layout that a plain diffusers
``pipe.load_lora_weights(dir)`` accepts, with the adapter config in its metadata so alpha != rank
survives the round trip.
"""

from __future__ import annotations

import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from rewardloop.artifacts import sort_safetensors_header
from rewardloop.models.families import get_family
from rewardloop.models.files import LORA_WEIGHTS, ModelError, tensor_shapes

# A diffusers-format LoRA key: <denoiser>.<module>.lora.{down,up}.weight (or peft's lora_{A,B}).
_LORA_KEY = re.compile(r"^(?P<prefix>[^.]+)\.(?P<module>.+)\.(?:lora\.(?P<old>down|up)|lora_(?P<new>[AB]))\.weight$")


def lora_config(lora_cfg: Mapping):
    from peft import LoraConfig

    return LoraConfig(
        r=lora_cfg["rank"],
        lora_alpha=lora_cfg["alpha"],
        init_lora_weights="gaussian",
        target_modules=list(lora_cfg["targets"]),
    )


def attach_lora(unet, lora_cfg: Mapping) -> list:
    """Add a trainable adapter to ``unet`` (base weights frozen); return its parameters."""
    unet.requires_grad_(False)
    try:
        unet.add_adapter(lora_config(lora_cfg))
    except ValueError as exc:
        raise ModelError(f"train.lora.targets: {exc}") from exc
    return [p for p in unet.parameters() if p.requires_grad]


def load_lora_into(unet, family: str, lora_dir: str) -> None:
    """Copy a saved LoRA's weights into the adapter attached by :func:`attach_lora`."""
    from diffusers.utils import convert_unet_state_dict_to_peft
    from peft import set_peft_model_state_dict

    weights = Path(lora_dir) / LORA_WEIGHTS
    if not weights.is_file():
        raise ModelError(f"{weights}: LoRA weights not found")
    state = get_family(family).pipeline_class().lora_state_dict(str(lora_dir), weight_name=LORA_WEIGHTS)
    state = state[0] if isinstance(state, tuple) else state  # sd15 adds network alphas, sd3 does not
    prefix = get_family(family).denoiser + "."
    unet_state = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
    try:
        result = set_peft_model_state_dict(unet, convert_unet_state_dict_to_peft(unet_state))
    except RuntimeError as exc:  # size mismatch: another rank or another architecture
        raise ModelError(f"{weights}: does not fit the adapter of this model (train.lora): {exc}") from exc
    unexpected = list(result.unexpected_keys)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if unexpected or missing:
        raise ModelError(
            f"{weights}: does not fit the adapter of this model (train.lora): "
            f"unexpected {unexpected[:3]}, missing {missing[:3]}"
        )


def save_lora(unet, family: str, lora_cfg: Mapping, out_dir: str | os.PathLike) -> Path:
    """Write ``out_dir/pytorch_lora_weights.safetensors`` atomically."""
    from diffusers.utils import convert_state_dict_to_diffusers
    from peft.utils import get_peft_model_state_dict

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    layers = get_peft_model_state_dict(unet)
    if get_family(family).lora_key_format == "diffusers":
        # diffusers' lora.down/up names, as its SD1.5/SDXL LoRA scripts save them; a "peft" family keeps
        # lora_A/B (see ModelFamily.lora_key_format).
        layers = convert_state_dict_to_diffusers(layers)
    layers = {k: v.detach().float().cpu().contiguous() for k, v in layers.items()}
    adapter_metadata = lora_config(lora_cfg).to_dict()
    # peft keeps the targets as a set, whose order changes with Python's hash seed: sorted, two
    # runs write the same bytes.
    adapter_metadata["target_modules"] = sorted(adapter_metadata["target_modules"])
    with tempfile.TemporaryDirectory(prefix=".tmp-lora-", dir=out_dir) as tmp:
        denoiser = get_family(family).denoiser
        get_family(family).pipeline_class().save_lora_weights(
            tmp,
            weight_name=LORA_WEIGHTS,
            **{f"{denoiser}_lora_layers": layers, f"{denoiser}_lora_adapter_metadata": adapter_metadata},
        )
        sort_safetensors_header(Path(tmp) / LORA_WEIGHTS)
        os.replace(Path(tmp) / LORA_WEIGHTS, out_dir / LORA_WEIGHTS)
    return out_dir / LORA_WEIGHTS


def load_lora_fused(pipe, family, lora_dir: str) -> None:
    """Load the LoRA at ``lora_dir`` into ``pipe`` and fuse it into the denoiser's weights; every layer of
    the file must land (diffusers skips the layers it cannot place with no more than a warning)."""
    weights = Path(lora_dir) / LORA_WEIGHTS
    if not weights.is_file():
        raise ModelError(f"{weights}: LoRA weights not found")
    layers = {m["module"] for m in map(_LORA_KEY.match, tensor_shapes(weights))
              if m and m["prefix"] == family.denoiser}
    with _consistent_names(weights, family) as folder:
        try:
            pipe.load_lora_weights(str(folder), weight_name=LORA_WEIGHTS, adapter_name="rewardloop")
        except Exception as exc:
            raise ModelError(f"{weights}: does not fit model {pipe.name_or_path} ({exc})") from exc
    denoiser = getattr(pipe, family.denoiser)
    placed = {name for name, module in denoiser.named_modules() if "rewardloop" in getattr(module, "lora_A", {})}
    missing = sorted(layers - placed)
    if missing or not placed:
        raise ModelError(f"{weights}: {len(missing)} of its {len(layers)} LoRA layers did not load into the "
                         f"{family.denoiser} (first: {missing[:1]})")
    pipe.fuse_lora(adapter_names=["rewardloop"])
    pipe.unload_lora_weights()


@contextmanager
def _consistent_names(weights: Path, family) -> Iterator[Path]:
    """The LoRA's folder, or, for a transformer whose file mixes lora.down/up with lora_A/B names (SD3 LoRAs
    saved before save_lora kept peft's names), a temporary copy with lora_A/B names only, metadata kept.
    A UNet's loader converts every key itself (SD1.5/SDXL files mix the names too: ff.net stays lora_A)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    keys = tensor_shapes(weights)
    if family.lora_key_format != "peft" or not any(".lora.down." in k for k in keys) or not any(".lora_A." in k for k in keys):
        yield weights.parent
        return
    with safe_open(str(weights), framework="pt") as handle:
        metadata = handle.metadata()
        tensors = {k.replace(".lora.down.", ".lora_A.").replace(".lora.up.", ".lora_B."): handle.get_tensor(k)
                   for k in handle.keys()}
    with tempfile.TemporaryDirectory(prefix=".tmp-lora-") as tmp:
        save_file(tensors, str(Path(tmp) / LORA_WEIGHTS), metadata=metadata)
        yield Path(tmp)


def _targeted(module: str, targets) -> bool:
    """peft's rule: a target names the module or its last dotted parts."""
    return any(module == t or module.endswith("." + t) for t in targets)


def _denoiser_shapes(model_path: str, denoiser: str) -> dict[str, list[int]]:
    """``{module: weight shape}`` of the base model's linear and conv layers, from its safetensors headers;
    empty when its weights are not on disk as safetensors (a hub id, a model not built yet)."""
    shapes = {}
    for file in sorted((Path(model_path) / denoiser).glob("*.safetensors")):
        shapes.update({k.removesuffix(".weight"): v for k, v in tensor_shapes(file).items()
                       if k.endswith(".weight") and len(v) in (2, 4)})
    return shapes


def check_init_lora(model_cfg: Mapping, train_cfg: Mapping) -> None:
    """model.init_lora, before any job: a diffusers LoRA of this family's denoiser whose layers fit the
    base model (when its weights are on disk) and, when a LoRA is trained, train.lora's rank and targets."""
    folder = model_cfg.get("init_lora")
    if not folder:
        return
    weights = Path(folder) / LORA_WEIGHTS
    if not weights.is_file():
        pickles = sorted(p.name for p in Path(folder).glob("*") if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        why = (f"; it holds {', '.join(pickles)}, a pickle, which can run code when it is loaded, so it is not "
               "read: convert it with safetensors.torch.save_file(torch.load(path, weights_only=True), "
               f"'{LORA_WEIGHTS}')") if pickles else ""
        raise ModelError(f"model.init_lora: {folder} has no {LORA_WEIGHTS}{why}")
    where, family = f"model.init_lora: {weights}", model_cfg["family"]
    denoiser = get_family(family).denoiser
    layers, prefixes = {}, set()
    for key, shape in tensor_shapes(weights).items():
        match = _LORA_KEY.match(key)
        if match:
            prefixes.add(match["prefix"])
            part = "down" if (match["old"] or match["new"]) in ("down", "A") else "up"
            if match["prefix"] == denoiser:
                layers.setdefault(match["module"], {})[part] = shape
    if not layers:
        found = f"its layers are for {', '.join(sorted(prefixes))}" if prefixes else "no diffusers-format LoRA keys"
        raise ModelError(f"{where}: no LoRA layers for the {denoiser} of model.family {family} ({found}: "
                         "a LoRA of another model family?)")
    base = _denoiser_shapes(model_cfg["path"], denoiser)
    for module, pair in sorted(layers.items()):
        if set(pair) != {"down", "up"}:
            raise ModelError(f"{where}: layer {module} has only its lora {'/'.join(pair)} weight")
        if base:
            lora_shape = [pair["up"][0], pair["down"][1]]
            if module not in base:
                raise ModelError(f"{where}: adapts {module}, which the {denoiser} at model.path {model_cfg['path']} "
                                 "does not have (a LoRA of another model family or architecture?)")
            if base[module][:2] != lora_shape:
                raise ModelError(f"{where}: layer {module} is {lora_shape[1]} -> {lora_shape[0]} in the LoRA but "
                                 f"{base[module][1]} -> {base[module][0]} in model.path {model_cfg['path']} "
                                 "(a LoRA of another model family or architecture?)")
    if train_cfg.get("adapter", "lora") != "lora":
        return  # a full fine-tune fuses the LoRA; rank and targets do not matter
    lora_cfg = train_cfg["lora"]
    ranks = sorted({pair["down"][0] for pair in layers.values()})
    if ranks != [lora_cfg["rank"]]:
        raise ModelError(f"{where}: rank {', '.join(map(str, ranks))}, but train.lora.rank is {lora_cfg['rank']} "
                         "(iteration 0 trains this LoRA further)")
    targets = list(lora_cfg["targets"])
    untargeted = sorted(m for m in layers if not _targeted(m, targets))
    if untargeted:
        raise ModelError(f"{where}: adapts {untargeted[0]} ({len(untargeted)} layer(s) in all), which "
                         f"train.lora.targets {targets} does not name")
    unused = [t for t in targets if not any(_targeted(m, [t]) for m in layers)]
    if unused:
        raise ModelError(f"{where}: has no layers for train.lora.targets {', '.join(unused)}")
    uncovered = sorted(m for m in base if _targeted(m, targets) and m not in layers)
    if uncovered:
        raise ModelError(f"{where}: has no layer for {uncovered[0]} ({len(uncovered)} in all), which "
                         f"train.lora.targets {targets} names")
