"""The CPU kernels pinned (config ``cpu_kernels``), so that a CPU run computes the same bytes on every
x86-64 CPU with AVX2, Intel or AMD, whatever else it has.

torch picks its kernels by the CPU it finds: ATen's vectorised ops (SLEEF maths, reductions) take
512-bit vectors on an AVX-512 CPU, oneDNN's convolutions AVX-512 or AMX, and MKL's BLAS a code path by
the CPU's vendor and model. Float sums then add in another order, and the tiny model's pretraining
amplifies the last-bit differences into other weights and another eval table. Each library has a
variable that fixes what it computes with (``PINNED``); MKL's is its conditional numerical
reproducibility on the ``COMPATIBLE`` branch, the one Intel documents for Intel and non-Intel CPUs alike
(its ``AVX2`` branch, pinned at first, holds on Intel CPUs only: an AMD EPYC and an Intel Xeon built
different tiny models). Each library reads its variable once, when it first computes (ATen: its first
dispatched operation, measured: an import of torch before it is harmless), so it must be in the
environment before anything computes in every process that does. The Snakefile calls ``pin`` once the
config is validated, before any job starts (its own process imports no torch); the jobs inherit the
variables (Snakemake's job processes, the warm worker that ``onstart`` launches and its forks); the
``rewardloop`` command calls it before its subcommand runs. A variable already set in the environment
wins, and is said. Measured, and the cost: docs/reliability.md#the-same-bytes-on-every-x86-64-cpu
(the same bytes on an Intel Xeon, under simulated AVX2-only CPUs and, for the networks' gradients,
under an emulated AMD EPYC).

``python bench/kernel_probe.py OUT`` builds a short tiny model, trains it one iteration and
prints the kernel level and the digests of the tensors: the test and bench/bench_cpu_kernels.py run it
in processes with the environments ``probe_environment`` gives.
"""

from __future__ import annotations

import os
import platform
from collections.abc import MutableMapping
from pathlib import Path

SETTINGS = ("auto", "avx2", "native")  # the config key's values (schemas/config.schema.yaml)

# What each library computes with, fixed. NNPACK and numpy's own SIMD dispatch are left alone:
# torch's CPU convolutions go through oneDNN, and the tiny build's bytes do not move with numpy's
# AVX-512 kernels switched off (measured, docs/reliability.md).
PINNED = {
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's own kernels (ATen's DispatchStub): no AVX-512
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN: convolutions, bf16/int8 matmul; no AVX-512, no AMX
    # MKL's conditional numerical reproducibility, on its branch that holds across vendors: its AVX2 branch
    # holds on Intel CPUs only (elsewhere MKL takes its AUTO branch: an AMD EPYC built another model)
    "MKL_CBWR": "COMPATIBLE",
}

# What an AVX2-only CPU would dispatch to without the pin, simulated on a larger one (the test and the
# bench compare it with the pin): every library capped at AVX2 by its hardware-limit variable.
AVX2_ONLY_CPU = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
}


def level(setting: str, device: str) -> str:
    """``avx2`` or ``native``: ``auto`` pins the CPU kernels unless ``device`` names a GPU (the run then
    computes there; ``device: auto`` may fall back to the CPU, so it is pinned)."""
    if setting not in SETTINGS:
        raise ValueError(f"cpu_kernels: {setting!r} is not one of {', '.join(SETTINGS)}")
    if setting == "auto":
        return "native" if str(device).startswith(("cuda", "mps")) else "avx2"
    return setting


def pin(setting: str, device: str, environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Set the variables of ``level(setting, device)`` in ``environ`` where it has none; return the
    lines to say: a variable given another value in the environment (kept), a CPU it cannot apply to."""
    if level(setting, device) == "native":
        return []
    if not has_avx2():
        return [f"rewardloop: cpu_kernels {setting}: this CPU ({platform.machine()}) has no AVX2; its "
                "libraries choose their own kernels, and a CPU run's bytes may differ from an x86-64 AVX2 CPU's"]
    lines = []
    for name, value in PINNED.items():
        given = environ.get(name)
        if given is None:
            environ[name] = value
        elif given.lower() != value.lower():
            lines.append(f"rewardloop: {name}={given} from the environment is kept (cpu_kernels {setting} "
                         f"would set {value}): a CPU run's bytes may then differ on another kind of CPU")
    return lines


def in_effect(environ: MutableMapping[str, str] = os.environ) -> str:
    """What a table's provenance records: ``avx2`` when every variable of the pin has its value, else
    ``native`` (nothing set) or the variables as they are."""
    given = {name: environ.get(name) for name in PINNED}
    if all(value is not None and value.lower() == PINNED[name].lower() for name, value in given.items()):
        return "avx2"
    if all(value is None for value in given.values()):
        return "native"
    return ", ".join(f"{name}={value}" for name, value in given.items() if value is not None)


def has_avx2() -> bool:
    """An x86-64 CPU with AVX2 and FMA (Linux: its flags; elsewhere: any x86-64)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return True
    return {"avx2", "fma"} <= set(flags.split())


def probe_environment(pinned: bool, avx2_only_cpu: bool = False, base: dict | None = None) -> dict:
    """``base`` (this process's environment) without any of the variables above, then pinned and/or as an
    AVX2-only CPU would be: the environment of a ``probe`` process."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in PINNED | AVX2_ONLY_CPU}
    if avx2_only_cpu:
        env.update(AVX2_ONLY_CPU)
    if pinned:
        env.update(PINNED)
    return env
