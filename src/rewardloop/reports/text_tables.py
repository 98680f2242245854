"""Tables for a console and for CSV: what `rewardloop summary` and `rewardloop compare` print."""

from __future__ import annotations

import csv
import io
from typing import Callable, Iterable, Mapping, Sequence


def aligned(headers: Sequence[str], body: Iterable[Sequence[str]]) -> str:
    """Columns under a header and a rule of dashes: the first (the rows' labels) left-aligned, so that no
    line starts with a blank (a reader that drops Snakemake's indented job lines keeps every row), the
    others right-aligned."""
    body = [list(row) for row in body]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in body)])


def csv_text(rows: Iterable[Mapping], columns: Sequence[str]) -> str:
    """CSV with a header line; None is an empty cell."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def add_table_command(commands, name: str, render: Callable[[str, str], str], help: str, results_help: str,
                      description: str | None = None) -> None:
    """``rewardloop <name> [results] [--format table|csv|json]``, printing ``render(results, format)``."""
    command = commands.add_parser(name, help=help, description=description)
    command.add_argument("results", nargs="?", default="results", help=results_help)
    command.add_argument("--format", choices=("table", "csv", "json"), default="table",
                         help="an aligned table, or CSV or JSON with the same column names")
    command.set_defaults(func=lambda args: print(render(args.results, args.format)))
