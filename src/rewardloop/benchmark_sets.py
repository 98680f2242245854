"""The prompt sets of the field's benchmarks (``rewardloop benchmark``), read from the user's files.

Each format gives a DataFrame with ``prompt_id``, ``prompt`` and ``category`` (None where the set has
none); errors name the file, the line or row, and what was expected. docs/benchmarks.md says where
each file comes from.

- ``drawbench``: CSV with the columns ``Prompts`` and ``Category`` (Google's DrawBench sheet, as the
  HF dataset shunk031/DrawBench exports it); ids ``r<row>``.
- ``pickapic``: Parquet or CSV with a ``caption`` column (yuvalkirstain/pickapic_v1's test split); its
  captions repeat (several image pairs per caption), so each unique caption once, in first-seen order.
- ``ocr``: flow_grpo's ``dataset/ocr/test.txt``: one prompt per line, its first double-quoted span the
  text to render (``rewards.ocr.extract_target``, the target the ``ocr`` reward reads).
- ``text``: one prompt per line.
- ``geneval``: GenEval's ``prompts/evaluation_metadata.jsonl``: one JSON object per line with ``prompt``,
  ``tag`` (single_object, two_object, counting, colors, position, color_attr), ``include`` (a list of
  ``{class, count, color?, position?}``) and optionally ``exclude``; ids ``g<line>``, ``category`` the tag,
  and a ``metadata`` column: each line's whole object, which a metric's server receives with each image
  (rewards.combine passes it to rewards that take it: remote ones).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd

from rewardloop.prompts import PromptFileError, require_file

FORMATS = ("drawbench", "pickapic", "ocr", "text", "geneval")
COLUMNS = ["prompt_id", "prompt", "category"]


def load(path: str | Path, fmt: str) -> pd.DataFrame:
    """The prompt set in ``path``, read as format ``fmt`` (one of FORMATS)."""
    path = Path(path)
    if fmt not in FORMATS:
        raise ValueError(f"benchmark format {fmt!r}: expected one of {', '.join(FORMATS)}")
    require_file(path, str(path))
    rows = {"drawbench": _drawbench, "pickapic": _pickapic, "ocr": _ocr, "text": _text,
            "geneval": _geneval}[fmt](path)
    if not rows:
        raise PromptFileError(f"{path}: no prompts in file ({fmt} format)")
    return pd.DataFrame(rows, columns=COLUMNS + ["metadata"] if fmt == "geneval" else COLUMNS)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PromptFileError(f"{path}: not UTF-8 text ({exc})") from exc


def _lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the non-blank lines."""
    lines = [(n, line.strip()) for n, line in enumerate(_read_text(path).splitlines(), start=1)]
    return [(n, line) for n, line in lines if line]


def _text(path: Path) -> list[tuple]:
    return [(f"p{n:05d}", line, None) for n, line in _lines(path)]


def _ocr(path: Path) -> list[tuple]:
    from rewardloop.rewards.ocr import extract_target

    for n, line in _lines(path):
        if extract_target(line) is None:
            raise PromptFileError(f"{path}: line {n}: no double-quoted text to render in {line!r} (ocr format: "
                                  f"each prompt quotes its target, as flow_grpo's dataset/ocr/test.txt)")
    return _text(path)


def _csv_records(path: Path, columns: tuple[str, ...], fmt: str) -> list[tuple[int, int, dict]]:
    """(row, line, {column: cell}) of each non-blank record of a CSV file (the header is row 1). CSV lets a
    quoted cell span lines, which in a prompt sheet is an unclosed quote merging two rows into one prompt:
    a record over several lines is refused, as is one with another number of cells than the header, or a
    header without ``columns``, each naming the line."""
    reader = csv.reader(io.StringIO(_read_text(path), newline=""), strict=True)
    first_line = 1  # where the record being read starts
    try:
        header = next(reader, [])
        missing = [c for c in columns if c not in header]
        if missing:
            raise PromptFileError(f"{path}: row 1 (header): missing column(s) {', '.join(missing)}; has "
                                  f"{', '.join(header) or 'none'} ({fmt} format: a CSV with the column(s) "
                                  f"{' and '.join(columns)})")
        records, first_line = [], reader.line_num + 1
        for cells in reader:
            if cells:
                if reader.line_num != first_line:
                    raise PromptFileError(f"{path}: line {first_line}: a quoted cell runs on to line {reader.line_num} "
                                          f"(an unclosed quote?); {fmt} format: one record per line")
                if len(cells) != len(header):
                    raise PromptFileError(f"{path}: line {first_line}: {len(cells)} cell(s) where the header has "
                                          f"{len(header)} ({fmt} format; a comma in a prompt needs the cell quoted)")
                records.append((len(records) + 2, first_line, dict(zip(header, cells))))
            first_line = reader.line_num + 1
    except csv.Error as exc:  # strict mode: a quote closed mid-cell, or the file ends inside a quoted cell
        raise PromptFileError(f"{path}: line {first_line}: not valid CSV from there ({exc} by line "
                              f"{reader.line_num}; an unclosed quote?); {fmt} format") from None
    return records


def _drawbench(path: Path) -> list[tuple]:
    rows = []
    for row_number, line, row in _csv_records(path, ("Prompts", "Category"), "drawbench"):
        prompt = row["Prompts"].strip()
        if not prompt:
            raise PromptFileError(f"{path}: row {row_number}: empty Prompts cell (drawbench format)")
        rows.append((f"r{row_number:05d}", prompt, row["Category"].strip() or None))
    return rows


def _pickapic(path: Path) -> list[tuple]:
    if path.suffix == ".parquet":
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types
            raise PromptFileError(f"{path}: not a readable Parquet file ({exc}); pickapic format: a Parquet or "
                                  f"CSV with a caption column") from exc
        if "caption" not in frame.columns:
            raise PromptFileError(f"{path}: no caption column; has {', '.join(map(str, frame.columns))} (pickapic "
                                  f"format: the test split's caption column)")
        captions = list(enumerate(frame["caption"], start=1))
    else:
        captions = [(row_number, row["caption"]) for row_number, _, row in _csv_records(path, ("caption",), "pickapic")]
    seen, rows = set(), []
    for index, caption in captions:
        if not isinstance(caption, str) or not caption.strip():
            raise PromptFileError(f"{path}: row {index}: empty or non-text caption {caption!r} (pickapic format)")
        caption = caption.strip()
        if caption not in seen:
            seen.add(caption)
            rows.append((f"c{len(rows) + 1:05d}", caption, None))
    return rows


def _geneval(path: Path) -> list[tuple]:
    rows = []
    for n, line in _lines(path):
        where = f"{path}: line {n}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{where}: not JSON ({exc}); geneval format: one JSON object per line, as "
                                  f"GenEval's prompts/evaluation_metadata.jsonl") from None
        if not isinstance(item, dict):
            raise PromptFileError(f"{where}: expected a JSON object, got {type(item).__name__} (geneval format)")
        for key in ("prompt", "tag"):
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise PromptFileError(f"{where}: no {key!r} (expected a non-empty string; geneval format: "
                                      f"prompt, tag, include, optionally exclude)")
        if not isinstance(item.get("include"), list):
            raise PromptFileError(f"{where}: 'include' is not a list (got {item.get('include')!r}; geneval "
                                  f"format: a list of {{class, count, color?, position?}})")
        if "exclude" in item and not isinstance(item["exclude"], list):
            raise PromptFileError(f"{where}: 'exclude' is not a list (got {item['exclude']!r}; geneval format)")
        rows.append((f"g{n:05d}", item["prompt"].strip(), item["tag"], item))
    return rows
