"""Content identity of a model, LoRA or reward checkpoint, cheap enough for multi-GB folders.

A job that reads a file the workflow did not make (the base model, model.init_lora, a reward's
checkpoint) must rerun when that file changes, even if its path does not. Hashing every byte of an
SDXL folder (15 GB) at every snakemake start is too slow, and a safetensors header with the file's
size is not enough (a retrained checkpoint of the same architecture has the same header and size).
So each file contributes its path in the folder, its size, every byte when it is small (configs,
tokenizers), and otherwise its safetensors header plus ``SAMPLES`` blocks of ``BLOCK`` bytes spread
evenly over it: a rewrite with other weights changes them. Hidden files and folders (a hub
download's ``.cache/``) and mtimes do not count, so a copy of the same folder has the same identity.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

SMALL = 1 << 20  # files up to 1 MiB are hashed whole
BLOCK = 1 << 16  # 64 KiB per sampled block
SAMPLES = 16


def fingerprint(path) -> str:
    """A 16-hex-digit identity of a file or folder (see the module); stat-cached per process."""
    path = Path(path).resolve()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and not _hidden(p, path))
    digest = hashlib.sha256()
    for file in files:
        stat = file.stat()
        rel = file.name if file == path else file.relative_to(path).as_posix()
        digest.update(f"{rel}\0{stat.st_size}\0".encode())
        digest.update(_file_digest(str(file), stat.st_size, stat.st_mtime_ns))
    return digest.hexdigest()[:16]


def _hidden(file: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in file.relative_to(root).parts)


@functools.lru_cache(maxsize=4096)
def _file_digest(file: str, size: int, mtime_ns: int) -> bytes:
    """The bytes a file contributes (cached while its size and mtime stay, within one process)."""
    with open(file, "rb") as handle:
        if size <= SMALL:
            return hashlib.sha256(handle.read()).digest()
        digest = hashlib.sha256()
        if file.endswith(".safetensors"):
            length = int.from_bytes(handle.read(8), "little")
            digest.update(handle.read(min(length, size - 8)))
        for k in range(SAMPLES):
            handle.seek(k * (size - BLOCK) // (SAMPLES - 1))
            digest.update(handle.read(BLOCK))
        return digest.digest()


def is_local(path) -> bool:
    return isinstance(path, (str, os.PathLike)) and Path(path).exists()
