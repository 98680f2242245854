"""The run's benchmark table (`rewardloop summary --benchmarks`): base vs checkpoints, per benchmark and metric.

Reads the tables `rewardloop benchmark` leaves (``<folder>/benchmark/<name>.parquet``, one row per image).
One row per benchmark × metric (each ``reward_<metric>`` column); per model folder (``base``, ``iter_XXX``):
the mean over the images, the half-width of its 95 % interval (Student's t over the images' scores, as
`rewardloop compare` over seeds) and the number of images. Means follow the references: DiffusionNFT's
scripts/evaluation.py reports each reward model's mean over the prompt set's images; flow_grpo's OCR
accuracy is the OCR reward's mean over its test set.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from rewardloop import results_layout as layout
from rewardloop.reports.compare import ci95
from rewardloop.reports.text_tables import aligned, csv_text

STATISTICS = ("mean", "ci95", "n")


def tables(results) -> dict[str, dict[str, Path]]:
    """{benchmark: {folder: its table}}, benchmarks sorted, folders base first then in iteration order."""
    found: dict[str, dict[str, Path]] = {}
    for _, folder in layout.RunLayout(results).folders():
        for path in sorted((folder / layout.BENCHMARK_DIR).glob("*.parquet")):
            found.setdefault(path.stem, {})[folder.name] = path
    return dict(sorted(found.items()))


def rows(results) -> tuple[list[dict], list[str]]:
    """(rows, model folders): a row per benchmark and metric with ``<folder>_mean``, ``_ci95`` and ``_n``."""
    from rewardloop.artifacts import read_table

    results = Path(results)
    if not results.is_dir():
        raise FileNotFoundError(f"{results}: not a folder")
    found = tables(results)
    if not found:
        raise FileNotFoundError(f"{results}: no {layout.benchmark_name('<name>')} in {layout.BASE}/ or any "
                                f"{layout.iteration_name('XXX')}/ (run `rewardloop benchmark` first)")
    folders = [f.name for _, f in layout.RunLayout(results).folders() if any(f.name in t for t in found.values())]
    out = []
    for name, per_folder in found.items():
        frames = {folder: read_table(path).to_pandas() for folder, path in per_folder.items()}
        metrics = sorted({c for frame in frames.values() for c in frame.columns
                          if c.startswith("reward_") and c != "reward_details"})
        for column in metrics:
            row = {"benchmark": name, "metric": column.removeprefix("reward_")}
            for folder in folders:
                values = frames[folder][column].dropna().tolist() if folder in frames and column in frames[folder] else []
                row.update({f"{folder}_mean": sum(values) / len(values) if values else None,
                            f"{folder}_ci95": ci95(values), f"{folder}_n": len(values) if values else None})
            out.append(row)
    return out, folders


def columns(folders: list[str]) -> list[str]:
    return ["benchmark", "metric", *[f"{folder}_{stat}" for folder in folders for stat in STATISTICS]]


def _cell(row: dict, folder: str, shared_n: bool) -> str:
    mean, half = row[f"{folder}_mean"], row[f"{folder}_ci95"]
    if mean is None:
        return "-"
    text = f"{mean:.4f}" + ("" if half is None or math.isnan(half) else f" ± {half:.4f}")
    return text if shared_n else f"{text} (n={row[f'{folder}_n']})"


def format_table(table: list[dict], folders: list[str]) -> str:
    """Aligned: benchmark, metric, n (the images per model, when the row's models have the same number),
    then per model folder ``mean ± ci95`` (with its own n where they differ)."""
    body = []
    for row in table:
        counts = {row[f"{folder}_n"] for folder in folders} - {None}
        shared = len(counts) == 1
        body.append([row["benchmark"], row["metric"], str(counts.pop()) if shared else "-",
                     *[_cell(row, folder, shared) for folder in folders]])
    return aligned(["benchmark", "metric", "n", *folders], body) + \
        "\nmean ± half-width of the 95 % interval (Student's t over the images); n: images per model"


def render(results, fmt: str = "table") -> str:
    table, folders = rows(results)
    if fmt == "csv":
        return csv_text(table, columns(folders)).rstrip("\n")
    if fmt == "json":
        return json.dumps(table, indent=2)
    return format_table(table, folders)
