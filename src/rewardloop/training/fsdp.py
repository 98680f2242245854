"""FSDP (``train.distributed: fsdp``): the trained denoiser's weights, its gradients and Adam's states sharded over
the processes, with torch's FSDP2 (``fully_shard``) applied here rather than through accelerate's plugin.

Why not accelerate's ``FullyShardedDataParallelPlugin(fsdp_version=2)``: on the CPU accelerate ignores it
without a word. Its AcceleratorState sets DistributedType.FSDP only inside the branch for GPU-like types
(accelerate 1.15 state.py:986-1013, ``elif self.distributed_type in [MULTI_GPU, ..., MULTI_NEURON]``), and a
gloo run is MULTI_CPU (state.py:808), so ``prepare`` wraps the model in DDP (bench/fsdp_probe.py's plugin
probe: 2 gloo ranks, ``distributed_type`` MULTI_CPU, the model a DistributedDataParallel; ``accelerate launch
--use_fsdp --fsdp_version 2`` alike). torch's ``fully_shard`` itself trains over gloo (the same probe), so
applying it here gives one code path, the same on the CPU (where the tests run it) and on GPUs; the
Accelerator then only provides the process group, the device, autocast and the reductions of the logs.

What is sharded: every block of the denoiser (its ``_no_split_modules`` classes: transformer blocks, ResNet
blocks), then the rest at the root; a separate frozen reference denoiser the same way. The LoRA and the
frozen base share the blocks' shards. The weights go to the device block by block, so a model loaded on
the CPU never stands whole on one GPU. Gradients are reduce-scattered after each micro-batch (no
``no_sync``: keeping them unsharded until the last micro-batch would cost a whole model's gradients).

Files stay as without FSDP: :func:`full_tensors` gathers (a collective: every rank calls it) and rank 0
writes the in-stage checkpoint, the LoRA and the full weights in their usual formats; :func:`shard_like`
cuts a full tensor read from those files into this rank's shard with no communication, so a DDP run's
checkpoint resumes under FSDP and the other way round.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

import torch


def is_sharded(tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def full(tensor) -> torch.Tensor:
    """The whole of a sharded tensor (a collective), a plain tensor as it is."""
    return tensor.full_tensor() if is_sharded(tensor) else tensor


def local(tensor) -> torch.Tensor:
    """This rank's shard of a sharded tensor, a plain tensor as it is."""
    return tensor.to_local() if is_sharded(tensor) else tensor


def shard_like(value: torch.Tensor, like) -> torch.Tensor:
    """``value`` (a whole tensor of ``like``'s global shape) as a tensor sharded as ``like``, cut locally (every
    rank holds ``value``: no communication); ``value`` itself where ``like`` is not sharded."""
    if not is_sharded(like) or is_sharded(value):
        return value
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(value.to(like.device, like.dtype), like.device_mesh, like.placements,
                             src_data_rank=None)


def mixed_precision_policy(mixed_precision: str):
    """FSDP's policy for ``train.mixed_precision``: bf16 gathers and computes the weights in bf16 and reduces the
    gradients in fp32 (the fp32 weights stay the sharded master copy); "no" keeps fp32 throughout."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if mixed_precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if mixed_precision == "no":
        return MixedPrecisionPolicy()
    raise ValueError(f"train.mixed_precision: {mixed_precision} is not offered with train.distributed: fsdp")


def blocks(model) -> list:
    """The modules to shard one by one, innermost first: those whose class is among the model's
    ``_no_split_modules`` (diffusers' and accelerate's notion of a block that is never split)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    # modules() lists a module before its descendants, so reversed it lists every block before its enclosing one.
    return [m for m in reversed(list(model.modules())) if type(m).__name__ in names and m is not model]


def shard_model(model, mixed_precision: str, device) -> None:
    """Shard ``model`` in place over the default process group (FSDP2), block by block, then its root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(torch.device(device).type, (torch.distributed.get_world_size(),))
    policy = mixed_precision_policy(mixed_precision)
    for block in blocks(model):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def full_tensors(named: Iterable[tuple[str, torch.Tensor]], keep_on: bool) -> dict[str, torch.Tensor]:
    """``{name: whole tensor on the CPU}``, gathered one tensor at a time (every rank must call it with the same
    names in the same order); only where ``keep_on`` (rank 0) are they kept, elsewhere the dict is empty."""
    out = {}
    for name, tensor in named:
        whole = full(tensor.detach())
        if keep_on:
            out[name] = whole.cpu()
        del whole
    return out


@contextmanager
def gathered_state_dict(model, keep: Callable[[str], bool], keep_on: bool) -> Iterator[None]:
    """Within: ``model.state_dict()`` returns the whole tensors of the keys ``keep`` selects (on rank 0; an
    empty dict elsewhere), so diffusers' save_pretrained and peft's get_peft_model_state_dict write the
    files they write without FSDP. Entering gathers (a collective)."""
    whole = full_tensors(((k, v) for k, v in model.state_dict().items() if keep(k)), keep_on)
    model.state_dict = lambda *args, **kwargs: dict(whole)  # an instance attribute shadows the method
    try:
        yield
    finally:
        del model.state_dict


def any_rank(flag: bool, device) -> bool:
    """Whether ``flag`` holds on any rank (a collective)."""
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return bool(value.item())
