"""Scatter/gather of the generate and score stages over parallel jobs (generate.shards, score.shards).

A shard is a run of whole batches: the rows of an iteration are cut at multiples of the stage's
batch size, so every batch a shard computes is exactly a batch of the unsharded job. Batched
kernels give results that depend (in the last float bits) on what else is in the batch, so this is
what makes the gathered artifacts equal the unsharded ones byte for byte, not just closely.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import pyarrow as pa

from rewardloop import results_layout as layout
from rewardloop.artifacts import read_provenance, read_table, read_tensors, write_table, write_tensors


class StageSharding:
    """How the workflow's rules split a stage into shards (generate.shards; score.shards, for scoring and
    rescoring).

    The stage's work is one rule, written once with the names and paths given here. Whole, it is named after the
    stage and writes the stage's files. Sharded, it is ``<stage>_shard``, one job per shard writing into the
    shard's folder (shards/<stage>_<kk>/), and a gather rule named after the stage joins the shards into the
    same files a whole stage writes. ``shard_param``: what a job's ``shard`` param is (an input function of the
    ``{shard}`` wildcard).
    """

    def __init__(self, stage: str, shards: int, shard_param=None):
        self.stage, self.shards, self.sharded = stage, shards, shards > 1
        self.work_rule = f"{stage}_shard" if self.sharded else stage
        self.shard_param = shard_param

    def output(self, folder: str, name: str, whole: str | None = None) -> str:
        """The work's file ``name``, in the {shard} pattern's folder when sharded, else ``whole``
        (by default ``folder/name``)."""
        if self.sharded:
            return f"{folder}/{layout.shard_name(self.stage, '{shard}')}/{name}"
        return whole or f"{folder}/{name}"

    def params(self) -> dict:
        """The work's shard params, which shard of how many (none when whole, the scripts' default)."""
        return {"shard": self.shard_param, "shards": self.shards} if self.sharded else {}

    def job(self, name: str) -> str:
        """A work job's name for its log and benchmark: ``name``, or ``name_{shard}`` when sharded."""
        return f"{name}_{{shard}}" if self.sharded else name

    def gathered(self, folder: str, name: str) -> list[str]:
        """``name`` of every shard, in order (what the gather job reads)."""
        return [f"{folder}/{layout.shard_name(self.stage, k)}/{name}" for k in range(self.shards)]


class ShardError(ValueError):
    pass


def shard_rows(rows: int, batch_size: int, shards: int, index: int, key: str = "shards") -> slice:
    """Rows of shard ``index`` of ``shards``: whole batches, as even a split as batches allow."""
    batches = math.ceil(rows / batch_size)
    if shards > batches:
        raise ShardError(f"{key}: {shards} shards but only {batches} batch(es) of {batch_size} for {rows} rows; "
                         f"every shard needs at least one batch (lower {key} or the batch size)")
    first, last = index * batches // shards, (index + 1) * batches // shards
    return slice(first * batch_size, min(last * batch_size, rows))


def gather_tables(paths: Sequence, out_path, writer: str | None = None) -> pa.Table:
    """Concatenate the shards' Parquet tables in shard order; the provenance is the shards' (all equal).
    ``writer``: the stage the gathered table stands for, named by its readers' errors."""
    tables = [read_table(path) for path in paths]
    meta = read_provenance(paths[0])
    for path in paths[1:]:
        if read_provenance(path) != meta:
            raise ShardError(f"{path}: provenance differs from {paths[0]} (shards of different runs?)")
    table = pa.concat_tables(tables)
    write_table(table, out_path, meta=meta, writer=writer)
    return table


def gather_tensors(paths: Sequence, out_path, writer: str | None = None) -> None:
    """Merge the shards' safetensors files (disjoint keys, or equal tensors under shared keys)."""
    from safetensors import safe_open

    merged: dict = {}
    for path in paths:
        for key, tensor in read_tensors(path).items():
            if key in merged and not bool((merged[key] == tensor).all()):
                raise ShardError(f"{path}: tensor {key!r} differs from another shard's")
            merged.setdefault(key, tensor)
    with safe_open(str(Path(paths[0])), framework="pt") as fh:
        meta = fh.metadata() or {}
    # write_tensors JSON-encodes metadata values; these already are JSON strings.
    write_tensors(merged, out_path, meta={k: json.loads(v) for k, v in meta.items()}, writer=writer)


def summed_metrics(shard_metrics: Sequence[dict], keys: Sequence[str]) -> dict:
    """``keys`` summed over the shards (counts, and perf/* seconds = compute time of all shards)."""
    return {key: sum(m[key] for m in shard_metrics if key in m) for key in keys}
