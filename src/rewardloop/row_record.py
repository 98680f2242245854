"""What a writer records about the rows of its artifact, and the check every reader makes against it.

``artifacts.write_table`` and ``write_tensors`` store a record beside the data: the writing stage, the
count and the ids (a table's row ids in row order: its ``sample_id`` column, or ``chosen``/``rejected``
for pairs; a safetensors file's tensor keys). ``read_table`` and ``read_tensors`` compare what they
read with it, so a file changed after its stage wrote it (a row dropped, rows reordered, a tensor
deleted) is refused, naming the file and what differs, instead of flowing on (a samples.parquet
without one row used to train on one pair fewer, exit 0). A file written before records existed has
none and is read as before. Pure functions: artifacts.py raises the error.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Sequence

RECORD_KEY = "rewardloop_rows"  # Parquet schema metadata key (as bytes) and safetensors metadata key
ROW_KEYS = ("sample_id", "chosen", "rejected")  # the columns that identify a table's row, those it has
SHOWN = 3  # ids named in a message; the rest are counted


def key_columns(names: Sequence[str]) -> list[str]:
    return [name for name in ROW_KEYS if name in names]


def row_ids(table) -> list[str] | None:
    """A pyarrow table's row ids ("a/b" for several key columns); None for a table without a key column."""
    columns = key_columns(table.column_names)
    if not columns:
        return None
    values = [table.column(name).to_pylist() for name in columns]
    return ["/".join(map(str, row)) for row in zip(*values)]


def make(count: int, ids: list[str] | None, writer: str | None) -> str:
    return json.dumps({"writer": writer, "count": count, "ids": ids})


def mismatch(raw: str | bytes | None, count: int, ids: list[str] | None, unit: str, label: str) -> str | None:
    """What differs between the ``count`` ``unit`` (ids ``ids``, each a ``label``) read and the record ``raw``,
    as the end of an error message; None when they agree or there is no record."""
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        writer, recorded, recorded_ids = record["writer"], int(record["count"]), record["ids"]
    except (ValueError, TypeError, KeyError):
        return f"its record of the {unit} ({RECORD_KEY}) is not readable: the file was changed after it was written"
    if count == recorded and (ids is None or recorded_ids is None or ids == recorded_ids):
        return None
    stage = writer or "its writer"
    head = f"{count} {unit} but {stage} recorded {recorded}" if count != recorded else \
        f"{unit} differ from what {stage} recorded"
    detail = _differences(ids, recorded_ids, unit, label, stage) if ids is not None and recorded_ids is not None else ""
    redo = f"delete it to redo {writer}" if writer else "delete it to redo the stage that wrote it"
    return f"{head}{detail}: the file was changed after {stage} wrote it; {redo}"


def _differences(ids: list[str], recorded: list[str], unit: str, label: str, stage: str) -> str:
    """" (sample_id X missing; ...)": the ids lost, the ids added, or the first one out of place."""
    missing = list((Counter(recorded) - Counter(ids)).elements())
    added = list((Counter(ids) - Counter(recorded)).elements())
    parts = [f"{label} {_named(missing)} missing"] if missing else []
    parts += [f"{label} {_named(added)} not recorded"] if added else []
    if not parts:
        at = next(i for i, (got, wrote) in enumerate(zip(ids, recorded)) if got != wrote)
        parts = [f"reordered: {unit[:-1]} {at} is {label} {ids[at]}, {stage} wrote {recorded[at]} there"]
    return f" ({'; '.join(parts)})"


def _named(ids: list[str]) -> str:
    more = len(ids) - SHOWN
    return ", ".join(ids[:SHOWN]) + (f" and {more} more" if more > 0 else "")
