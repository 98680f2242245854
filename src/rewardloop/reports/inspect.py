"""`rewardloop inspect PATH`: a readable summary of any artifact (Parquet, safetensors, JSON, folder).

A file is described in full (columns, statistics, provenance, first row; tensor groups; JSON text). A
folder is listed briefly, one line per artifact below it (its path and headline: rows, tensors, keys),
unless ``verbose`` asks for every artifact in full.
"""

from __future__ import annotations

import json
from pathlib import Path

from rewardloop.artifacts import TEMP_PREFIX, ArtifactError, check_parquet_footer, read_provenance, read_table

STAT_COLUMNS = ("reward", "margin", "advantage")
SUFFIXES = (".parquet", ".safetensors", ".json")
# A JSON file above this size is not read (metrics and adapter files are kilobytes; `rewardloop inspect`
# shows only a JSON's first 4000 characters anyway).
MAX_JSON_BYTES = 64 * 2**20
# A folder's listing names at most this many artifacts, then how many it left out (a folder of 10,000 files
# printed 10,001 lines): `rewardloop inspect` on a subfolder lists what is below it.
MAX_LISTED = 200


def describe(path: str | Path, verbose: bool = False) -> str:
    path = Path(path)
    if path.is_dir():  # every artifact below it: results/iter_000/ also shows checkpoint/, metrics/, train/
        files = artifacts_below(path)
        if not files:
            return f"{path}: no artifacts"
        shown, left_out = files[:MAX_LISTED], len(files) - MAX_LISTED
        more = [f"... and {left_out} more artifact(s) not shown (at most {MAX_LISTED}; inspect a subfolder for "
                "the rest)"] if left_out > 0 else []
        if verbose:
            return "\n\n".join([*(describe(p) for p in shown), *more])
        return "\n".join([_listing(path, files, shown), *more])
    if not path.exists():
        raise ArtifactError(f"{path}: file not found")
    if path.suffix == ".parquet":
        return _describe_table(path)
    if path.suffix == ".safetensors":
        return _describe_tensors(path)
    if path.suffix == ".json":
        return _describe_json(path)
    raise ArtifactError(f"{path}: unknown artifact type (expected .parquet, .safetensors, .json or a folder)")


def artifacts_below(folder: Path) -> list[Path]:
    """The artifacts at any depth below ``folder``, sorted (temporary files of unfinished writes left out)."""
    return sorted(p for p in folder.rglob("*") if p.suffix in SUFFIXES and p.is_file() and not p.name.startswith(TEMP_PREFIX))


def _listing(folder: Path, files: list[Path], shown: list[Path]) -> str:
    """The count of ``files``, then one line per ``shown`` artifact: its path below ``folder`` and its
    headline, read from the file's header only."""
    names = [str(p.relative_to(folder)) for p in shown]
    width = max(map(len, names))
    lines = [f"{folder}: {len(files)} artifacts (details: rewardloop inspect -v)"]
    lines += [f"  {name.ljust(width)}  {headline(p)}" for name, p in zip(names, shown)]
    return "\n".join(lines)


def headline(path: Path) -> str:
    """What an artifact is in a few words: ``Parquet, 8 rows, 12 columns``, ``safetensors, 24 tensors``,
    ``JSON, 5 keys``; an unreadable one says so rather than stopping the listing."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            check_parquet_footer(path)
            meta = pq.read_metadata(path)
            return f"Parquet, {meta.num_rows} rows, {meta.num_columns} columns"
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="np") as fh:
                return f"safetensors, {len(list(fh.keys()))} tensors"
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            return f"JSON, {size / 2**20:.1f} MiB, too large to summarise"
        value = json.loads(path.read_text(encoding="utf-8"))
        return f"JSON, {len(value)} keys" if isinstance(value, dict) else f"JSON, {type(value).__name__}"
    except Exception as exc:  # one broken file must not hide the others; `inspect FILE` says where it breaks
        return f"unreadable ({type(exc).__name__})"


def _describe_json(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        return f"{path}: JSON, {size / 2**20:.1f} MiB, too large to summarise (limit {MAX_JSON_BYTES // 2**20} MiB)"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # the decode error says line and column
        raise ArtifactError(f"{path}: not valid JSON ({exc})") from exc
    return f"{path}\n" + json.dumps(value, indent=2)[:4000]


def _describe_table(path: Path) -> str:
    table = read_table(path, vouched=False)  # any Parquet file is described
    frame = table.drop_columns([c for c in table.column_names if c == "image"]).to_pandas()
    lines = [f"{path}: Parquet, {table.num_rows} rows"]
    lines.append("columns: " + ", ".join(f"{f.name} ({f.type})" for f in table.schema))
    for column in frame.columns:
        if column in STAT_COLUMNS or (column.startswith("reward_") and column != "reward_details"):
            s = frame[column].astype(float)
            lines.append(
                f"{column}: mean {s.mean():.4f}  std {s.std(ddof=0):.4f}  min {s.min():.4f}  max {s.max():.4f}"
            )
    if "prompt_id" in frame:
        lines.append(f"distinct prompt_id: {frame['prompt_id'].nunique()}")
    lines.append("provenance: " + json.dumps(read_provenance(path), sort_keys=True))
    if len(frame):
        lines.append("first row: " + json.dumps(frame.iloc[0].to_dict(), default=str)[:500])
    return "\n".join(lines)


def _describe_tensors(path: Path) -> str:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as fh:
            keys = list(fh.keys())
            metadata = fh.metadata() or {}
            shapes = {k: fh.get_slice(k).get_shape() for k in keys[:5]}
    except Exception as exc:
        raise ArtifactError(f"{path}: not a readable safetensors file ({exc})") from exc
    groups: dict[str, int] = {}
    for key in keys:
        prefix = key.split("/", 1)[0] if "/" in key else key.split(".", 1)[0]
        groups[prefix] = groups.get(prefix, 0) + 1
    lines = [f"{path}: safetensors, {len(keys)} tensors"]
    lines.append("groups: " + ", ".join(f"{k} ({v})" for k, v in sorted(groups.items())))
    lines.extend(f"  {k}: {shape}" for k, shape in shapes.items())
    if metadata:
        lines.append("metadata: " + ", ".join(f"{k}={v[:120]}" for k, v in metadata.items()))
    return "\n".join(lines)
