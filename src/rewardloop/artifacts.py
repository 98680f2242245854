"""Atomic, provenance-stamped artifact I/O: Parquet tables, safetensors tensors, JSON metrics.

Every write goes to a temporary file in the destination folder and is renamed into place, so a
killed job never leaves a file that looks finished. Every table carries provenance in its Parquet
schema metadata under the key ``rewardloop`` (a JSON object). Tables and tensor files also carry a
record of their rows (see row_record), which every read checks.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from rewardloop import __version__, row_record
from rewardloop.host import cpu_kernels

PROVENANCE_KEY = b"rewardloop"
ROWS_KEY = row_record.RECORD_KEY.encode()
DATASETS_KEY = b"huggingface"  # what 🤗 datasets reads its features from
TEMP_PREFIX = ".tmp-"
# Images live in a `struct<bytes: binary, path: string>` column, the layout of `datasets`' Image feature.
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


class ArtifactError(ValueError):
    """An artifact on disk is missing, unreadable or does not match its contract."""


def config_hash(cfg: Mapping) -> str:
    """Stable short hash of a (JSON-serialisable) config mapping."""
    blob = json.dumps(cfg, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def provenance(stage_config: Mapping, iteration: int | None, model_ref: str | None) -> dict:
    """A table's provenance: its stage config's hash, the model, and the fingerprints of the files outside
    results/ the stage read (``inputs``: the base model, reward checkpoints; see config.input_identities)."""
    return {
        "config_hash": config_hash(stage_config),
        "iteration": iteration,
        "model": model_ref,
        "inputs": dict(stage_config.get("inputs", {})),
        "rewardloop_version": __version__,
        "cpu_kernels": cpu_kernels.in_effect(),  # the kernels a CPU stage computed with (config cpu_kernels)
    }


def default_mode(directory: bool = False) -> int:
    """The permissions a plain ``open()`` (or ``mkdir``) would give under the current umask."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


class OutOfSpaceError(ArtifactError):
    """An artifact could not be written: the disk is full, or a file size limit or quota was hit."""


_OUT_OF_SPACE = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def _out_of_space_reason(exc: BaseException) -> str | None:
    """The errno text ("File too large", ...) of a full disk, ``ulimit -f`` or a quota, also when a
    library wrapped the OSError (pyarrow and safetensors raise their own types, with the errno
    text); None for any other failure."""
    if isinstance(exc, OSError) and exc.errno in _OUT_OF_SPACE:
        return os.strerror(exc.errno)
    return next((os.strerror(c) for c in _OUT_OF_SPACE if os.strerror(c) in str(exc)), None)


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """Re-raise an out-of-space failure while writing ``path`` as one clear OutOfSpaceError."""
    try:
        yield
    except Exception as exc:
        reason = _out_of_space_reason(exc)
        if reason is None:
            raise
        raise OutOfSpaceError(
            f"{path}: could not be written ({reason}): the disk is full, or a file size limit "
            "(ulimit -f) or quota was reached; nothing was replaced and earlier artifacts are intact"
        ) from exc


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX + path.name + ".", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        with _writing(path):
            yield tmp
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, default_mode())  # mkstemp makes it owner-only; artifacts are for the whole group
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; it replaces ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX + path.name + ".", dir=path.parent))
    try:
        with _writing(path):
            yield tmp
        os.chmod(tmp, default_mode(directory=True))  # mkdtemp makes it owner-only
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_temps(folder: str | os.PathLike) -> int:
    """Delete the temporary files and folders that killed jobs left under ``folder``; their count.

    Call it only while no job can be writing there (the run lock is held and no job has started):
    a temp name belongs to a write in progress or to a write that will never finish. Readers never
    see temps anyway (they open final names only); this just gives the space back.
    """
    removed = 0
    for temp in sorted(Path(folder).rglob(TEMP_PREFIX + "*"), reverse=True):  # children before parents
        if temp.is_dir() and not temp.is_symlink():
            shutil.rmtree(temp, ignore_errors=True)
        else:
            temp.unlink(missing_ok=True)
        removed += 1
    return removed


def datasets_features(schema: pa.Schema) -> bytes | None:
    """The schema metadata 🤗 ``datasets`` reads (key ``huggingface``) naming the image columns as its
    ``Image`` feature, so that ``load_dataset("parquet", ...)`` decodes them to PIL with no cast; the
    other columns it types from Arrow. None for a table without images."""
    images = {field.name: {"_type": "Image"} for field in schema if field.type == IMAGE_TYPE}
    return json.dumps({"info": {"features": images}}).encode() if images else None


def write_table(table: pa.Table, path: str | os.PathLike, meta: Mapping | None = None,
                writer: str | None = None) -> None:
    """Write a pyarrow Table (or pandas DataFrame) atomically with provenance metadata, the record of its
    rows that readers check (``writer``: the stage, named in their error) and, for a table with images,
    the ``datasets`` features that decode them."""
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    existing = dict(table.schema.metadata or {})
    existing[PROVENANCE_KEY] = json.dumps(dict(meta or {}), default=str).encode()
    existing[ROWS_KEY] = row_record.make(table.num_rows, row_record.row_ids(table), writer).encode()
    features = datasets_features(table.schema)
    if features:
        existing[DATASETS_KEY] = features
    table = table.replace_schema_metadata(existing)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


# A Parquet footer (schema, row groups, key-value metadata: provenance and the rows record) above this is not
# read: pyarrow allocates what a footer declares before it can tell a crafted one from a real one, and the
# artifacts' footers are kilobytes (a run of 100,000 samples: a few MB of row ids).
MAX_PARQUET_FOOTER = 64 * 2**20
PARQUET_MAGIC = b"PAR1"


def check_parquet_footer(path: str | os.PathLike) -> int:
    """The size of ``path``'s Parquet footer, read from its last 8 bytes, refused (naming the file) unless it
    fits the file and MAX_PARQUET_FOOTER: the bound on what a reader lets pyarrow allocate for it."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size < 12:
            raise ArtifactError(f"{path}: not a readable Parquet file ({size} bytes, too short for one)")
        handle.seek(-8, os.SEEK_END)
        tail = handle.read(8)
    footer = int.from_bytes(tail[:4], "little")
    if tail[4:] != PARQUET_MAGIC:
        raise ArtifactError(f"{path}: not a readable Parquet file (no {PARQUET_MAGIC.decode()} at its end: cut short?)")
    if footer > min(size - 12, MAX_PARQUET_FOOTER):
        raise ArtifactError(f"{path}: not a readable Parquet file (its footer declares {footer} bytes of metadata, the "
                            f"file has {size} bytes; a reader takes at most {MAX_PARQUET_FOOTER // 2**20} MiB)")
    return footer


def read_table(path: str | os.PathLike, required: Iterable[str] = (),
               columns: Iterable[str] | None = None, vouched: bool = True) -> pa.Table:
    """Read a Parquet artifact (only ``columns``, when given), failing with a message naming the file and
    missing columns, or what differs from the record of its rows its writer left (see row_record).

    ``vouched`` (a stage's artifact): the file must carry that record or, written before records existed,
    rewardloop's provenance (which every table ``write_table`` wrote has carried): a file with neither
    was written by another program and is refused. ``vouched=False``: a user's file (offline pairs, the
    table `rewardloop score` reads, anything `rewardloop inspect` is given)."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path}: file not found")
    check_parquet_footer(path)
    try:
        schema = pq.read_schema(path)
        wanted = None if columns is None else list(dict.fromkeys(columns))
        missing = [c for c in [*required, *(wanted or [])] if c not in schema.names]
        if not missing:
            keys = row_record.key_columns(schema.names)
            table = pq.read_table(path, columns=None if wanted is None else list(dict.fromkeys(wanted + keys)))
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise ArtifactError(f"{path}: not a readable Parquet file ({exc})") from exc
    if missing:
        raise ArtifactError(f"{path}: missing column(s) {', '.join(missing)}; has {', '.join(schema.names)}")
    metadata = schema.metadata or {}
    if vouched and ROWS_KEY not in metadata and PROVENANCE_KEY not in metadata:
        raise ArtifactError(f"{path}: carries neither the record of its rows ({row_record.RECORD_KEY}) nor "
                            "rewardloop's provenance: not a table a stage of this workflow wrote (replaced by "
                            "another program?); delete it to redo the stage that writes it")
    differs = row_record.mismatch(metadata.get(ROWS_KEY), table.num_rows,
                                  row_record.row_ids(table), "rows", "+".join(keys))
    if differs:
        raise ArtifactError(f"{path}: {differs}")
    return table if wanted is None else table.select(wanted)


def read_provenance(path: str | os.PathLike) -> dict:
    check_parquet_footer(path)
    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(PROVENANCE_KEY)
    return json.loads(raw) if raw else {}


def benchmark_seconds(path: str | os.PathLike) -> float | None:
    """Wall seconds (column ``s``, last row) of a Snakemake benchmark TSV; None when absent or empty."""
    try:
        lines = Path(path).read_text().splitlines()
        header, last = lines[0].split("\t"), lines[-1].split("\t")
        return float(last[header.index("s")]) if len(lines) > 1 else None
    except (OSError, ValueError, IndexError):
        return None


def json_or_empty(path: str | os.PathLike) -> dict:
    """A JSON file's content; {} when it is missing or unreadable (a stage that has not run, or not yet)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def write_json(obj, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_tensors(tensors: Mapping, path: str | os.PathLike, meta: Mapping | None = None,
                  writer: str | None = None) -> None:
    """Save a dict of torch tensors as safetensors, atomically, with string metadata and the record of
    its keys that readers check (``writer``: the stage, named in their error)."""
    from safetensors.torch import save_file

    metadata = {k: json.dumps(v, default=str) for k, v in (meta or {}).items()}
    metadata[row_record.RECORD_KEY] = row_record.make(len(tensors), sorted(tensors), writer)
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
        sort_safetensors_header(tmp)


def sort_safetensors_header(path: str | os.PathLike) -> None:
    """Rewrite a safetensors file's JSON header with sorted keys, in place.

    safetensors keeps the metadata in a hash map whose order changes from process to process, so
    the same tensors and metadata would give different bytes (and sha256) in two runs. Reordering
    keys keeps the header's length (compact JSON, same content), and the tensor offsets are
    relative to the end of the header, so only the header bytes change.
    """
    with open(path, "r+b") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
        blob = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        if len(blob) > size:  # not the compact form safetensors writes: leave the file as it is
            return
        fh.seek(8)
        fh.write(blob + b" " * (size - len(blob)))  # safetensors pads its header with spaces


def read_tensors(path: str | os.PathLike, numpy: bool = False) -> dict:
    """The file's tensors (torch), or numpy arrays with ``numpy=True`` (no torch import: faster job start)."""
    if numpy:
        from safetensors.numpy import load_file
    else:
        from safetensors.torch import load_file

    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path}: file not found")
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), framework="np") as fh:
            recorded = (fh.metadata() or {}).get(row_record.RECORD_KEY)
    except Exception as exc:
        raise ArtifactError(f"{path}: not a readable safetensors file ({exc})") from exc
    differs = row_record.mismatch(recorded, len(tensors), sorted(tensors), "tensors", "tensor")
    if differs:
        raise ArtifactError(f"{path}: {differs}")
    return tensors


def encode_png(image, name: str) -> dict:
    import io

    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return {"bytes": buf.getvalue(), "path": name}


def decode_image(cell: Mapping, where: str):
    """Decode one image cell; ``where`` names the sample/file for the error message."""
    import io

    from PIL import Image

    try:
        image = Image.open(io.BytesIO(cell["bytes"]))
        image.load()
    except Exception as exc:
        raise ArtifactError(f"{where}: image does not decode ({exc})") from exc
    return image.convert("RGB")
