"""Weights files that are what their names say, checked at startup before Snakemake can delete anything.

A file name is not a file: a download interrupted midway leaves a ``.safetensors`` with a complete
header and half its tensors, a hub-cache clean-up leaves the snapshot's links pointing at nothing.
Both used to pass the startup checks (they list names), change the input's fingerprint, and so make
Snakemake delete the finished outputs of every job that reads the model before the first of those
jobs failed. Here every file of a model folder, init LoRA or reward checkpoint is opened:

- a link is followed; a dangling one is named with its target;
- a safetensors file's header is parsed and the size it declares (header + the end of the last
  tensor) compared with the file's size;
- a sharded checkpoint's index (``*.index.json``) must name only shards that are there;
- a pickle-format checkpoint (``.bin``, ``.pt``, ``.pth``, ``.ckpt``) must be a complete zip archive,
  torch's format since 1.6, whose central directory sits at the end of the file: a cut file has none.
  Such files are read with ``torch.load(weights_only=True)`` (diffusers, the reward loaders), which
  refuses pickles that would run code; here only their completeness is checked.

Only headers and zip directories are read: a few reads per file, whatever its size.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path

from rewardloop.models.layout import LayoutError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
INDEX_SUFFIX = ".index.json"  # a sharded checkpoint's map of tensors to shard files
MAX_HEADER = 100 << 20  # safetensors refuses headers over 100 MB


def check_files(path: str | os.PathLike, key: str) -> None:
    """Every file at ``path`` (a file, or a folder's files outside hidden folders) is complete; the
    error names ``key`` (the config key that gave the path), the file and what is wrong."""
    path = Path(path)
    for file in _files(path, key):
        if file.name.endswith(".safetensors"):
            check_safetensors(file, key)
        elif file.name.endswith(PICKLE_SUFFIXES):
            check_zip_checkpoint(file, key)
        elif file.name.endswith(INDEX_SUFFIX):
            check_shard_index(file, key)


def _files(path: Path, key: str):
    _check_link(path, key)
    if path.is_file():
        yield path
        return
    for directory, subdirs, names in os.walk(path, followlinks=True):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))  # a hub download's .cache/
        for name in sorted(names):
            if not name.startswith("."):
                file = Path(directory, name)
                _check_link(file, key)
                yield file


def _check_link(file: Path, key: str) -> None:
    if file.is_symlink() and not file.exists():
        raise LayoutError(f"{key}: {file} is a link to {os.readlink(file)}, which does not exist (a cleaned-up "
                          "hub cache? download the model again, or point the key at a folder that holds it)")


def check_safetensors(file: Path, key: str) -> None:
    """The header parses and declares exactly the file's size."""
    size = file.stat().st_size
    with open(file, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise LayoutError(f"{key}: {file} is {size} bytes, too short for a safetensors file (cut short?)")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER or 8 + length > size:
            raise LayoutError(f"{key}: {file}: its first 8 bytes declare a {length}-byte header but the file has "
                              f"{size} bytes (not a safetensors file, or cut short)")
        try:
            header = json.loads(handle.read(length))
        except (ValueError, UnicodeDecodeError) as exc:
            raise LayoutError(f"{key}: {file}: the safetensors header is not valid JSON ({exc})") from exc
    ends = [entry["data_offsets"][1] for name, entry in header.items()
            if name != "__metadata__" and isinstance(entry, dict) and "data_offsets" in entry]
    declared = 8 + length + max(ends, default=0)
    if size < declared:
        raise LayoutError(f"{key}: {file} is cut short: its header declares {declared} bytes, the file has {size} "
                          f"({100 * size / declared:.0f} %; an interrupted download? download it again)")
    if size > declared:
        raise LayoutError(f"{key}: {file}: its header declares {declared} bytes but the file has {size} "
                          "(bytes appended after the tensors: not a file safetensors will load)")


def check_shard_index(file: Path, key: str) -> None:
    """A sharded checkpoint's index parses, and every shard its ``weight_map`` names is beside it (each
    shard is then checked as a file of its own)."""
    try:
        weight_map = json.loads(file.read_text()).get("weight_map")
    except (ValueError, UnicodeDecodeError, AttributeError) as exc:
        raise LayoutError(f"{key}: {file}: not a JSON object with a weight_map ({exc}; a sharded checkpoint's "
                          "index)") from None
    if not isinstance(weight_map, dict):
        raise LayoutError(f"{key}: {file}: no weight_map object (a sharded checkpoint's index maps each tensor to "
                          "its shard file)")
    missing = sorted({shard for shard in weight_map.values() if not (file.parent / str(shard)).is_file()})
    if missing:
        raise LayoutError(f"{key}: {file} names {len(missing)} shard(s) that are not in {file.parent}: "
                          f"{', '.join(missing)} (an incomplete download? download the model again)")


def check_zip_checkpoint(file: Path, key: str) -> None:
    """A torch checkpoint is a complete zip archive (its central directory, at the end, is there)."""
    if not zipfile.is_zipfile(file):
        raise LayoutError(f"{key}: {file} ({file.stat().st_size} bytes) is not a complete torch checkpoint (no zip "
                          "directory at its end: cut short, or saved by torch < 1.6 in the legacy format; "
                          "save it again, as safetensors preferably)")
