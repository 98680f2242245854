"""In-stage training state (adapter weights, optimizer, schedule, step) in one safetensors file.

No pickle: tensors go into the safetensors body, everything else into its JSON metadata. The file
is written atomically, so a job killed while saving leaves the previous state intact. A state
whose fingerprint (stage config + inputs) differs from the current job's is ignored.

Under FSDP (rewardloop.training.fsdp) the same file holds the whole tensors: saving gathers them (``gather``,
every rank calls save_state, rank 0 writes), loading cuts each rank's shard from them (``place``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable

import torch

from rewardloop.artifacts import ArtifactError, read_tensors, write_tensors

STATE_FILE = "state.safetensors"


def _on_cpu(items: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().cpu() for name, tensor in items}


def save_state(
    state_dir, step: int, fingerprint: str, named_params, optimizer, lr_scheduler, history: list,
    gather: Callable[[Iterable[tuple[str, torch.Tensor]]], dict] = _on_cpu, write: bool = True,
) -> None:
    """``gather``: the named tensors as whole CPU tensors (FSDP: a collective); ``write``: this rank writes."""
    items = [(f"param/{name}", p) for name, p in named_params]
    opt = optimizer.state_dict()
    opt_meta = {"param_groups": opt["param_groups"], "state": {}}
    for index, entry in opt["state"].items():
        opt_meta["state"][str(index)] = sorted(entry)
        items += [(f"opt/{index}/{key}", torch.as_tensor(value)) for key, value in entry.items()]
    tensors = gather(items)
    if not write:
        return
    meta = {
        "step": step,
        "fingerprint": fingerprint,
        "optimizer": opt_meta,
        "lr_scheduler": lr_scheduler.state_dict(),
        "history": history,
    }
    write_tensors(tensors, Path(state_dir) / STATE_FILE, meta={"rewardloop_state": meta})


def load_state(state_dir, fingerprint: str, named_params, optimizer, lr_scheduler,
               place: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = lambda value, like: value
               ) -> tuple[int, list]:
    """Restore a matching state; return (step to continue from, metrics history so far). ``place(value, param)``:
    a whole tensor of the file as ``param`` holds it (FSDP: this rank's shard)."""
    path = Path(state_dir) / STATE_FILE
    if not path.is_file():
        return 0, []
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = json.loads(fh.metadata()["rewardloop_state"])
        tensors = read_tensors(path)
    except (ArtifactError, KeyError, json.JSONDecodeError, OSError):
        return 0, []  # unreadable state: start over rather than trust it
    if meta["fingerprint"] != fingerprint:
        return 0, []
    with torch.no_grad():
        for name, param in named_params:
            param.copy_(place(tensors[f"param/{name}"], param))
    params = [p for group in optimizer.param_groups for p in group["params"]]  # the state's indices

    def placed(index: int, value: torch.Tensor) -> torch.Tensor:  # a per-weight state (Adam's moments) as its weight
        return place(value, params[index]) if value.shape == params[index].shape else value

    opt_state = {
        int(index): {key: placed(int(index), tensors[f"opt/{index}/{key}"]) for key in keys}
        for index, keys in meta["optimizer"]["state"].items()
    }
    optimizer.load_state_dict({"state": opt_state, "param_groups": meta["optimizer"]["param_groups"]})
    lr_scheduler.load_state_dict(meta["lr_scheduler"])
    return int(meta["step"]), list(meta["history"])
