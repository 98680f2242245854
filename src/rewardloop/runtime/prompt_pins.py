"""A run's prompt sets pinned by their prompts: a rerun is decided by the prompts, never by the file's spelling.

Jobs used to read the configured prompt file itself: its path was in their params and the file among their
inputs, so moving it, or saving it with other line endings, planned the whole run again although every prompt
was the same (issue 46 §7). Now the Snakefile reads each configured prompt file once (``prompts.load_prompts``:
the ids and texts the jobs would read) and points the config at ``results/prompts/<key>-<digest>.jsonl``, those
ids and texts as JSONL, named by the sha256 of that text; the jobs read that file. Rule ``pin_prompts`` writes it
when no such file is there yet (atomically, never rewritten; planning writes nothing): the same prompts are the
same file, and nothing reruns; other prompts are another file, written by its job, and what reads them reruns.

Records of runs finished before this name the configured file as the jobs' input and in their params:
:func:`migrate_records` rewrites those names once to the pin of the same prompts (the records' other contents
are kept) and writes those pins with the configured file's mtime (older than what was made from it), so an
upgrade reruns nothing. A record naming another file than the config's (the file was moved at the same time) is
left as it is: its jobs rerun.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping, MutableMapping

from rewardloop.artifacts import atomic_path
from rewardloop.prompts import load_prompts

FOLDER = "prompts"  # under results/
KEYS = ("train", "eval")
# Written once Snakemake's records of this working directory name pins instead of the configured files.
MARKER = "rewardloop-pinned-prompts"


def pinned_text(source: str | os.PathLike, key: str) -> str:
    """The prompts of ``source`` as the jobs read them (ids and texts), one JSON object a line."""
    table = load_prompts(source, key=f"prompts.{key}")
    return "".join(json.dumps({"id": prompt_id, "prompt": prompt}, ensure_ascii=False) + "\n"
                   for prompt_id, prompt in zip(table.prompt_id, table.prompt))


def pin_path(source: str | os.PathLike, results: str | os.PathLike, key: str) -> str:
    """Where the pin of ``source``'s prompts lies under ``results`` (nothing is written)."""
    text = pinned_text(source, key)
    return str(Path(results) / FOLDER / f"{key}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl")


def write_pin(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Write the pin ``target`` of ``source``'s prompts, atomically, with the source's mtime."""
    target = Path(target)
    key = target.name.split("-")[0]
    with atomic_path(target) as tmp:
        tmp.write_text(pinned_text(source, key), encoding="utf-8")
        stat = Path(source).stat()
        os.utime(tmp, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def pin_config(config: MutableMapping, results: str | os.PathLike = "results") -> dict[str, str]:
    """Point ``config``'s prompt files at their pins (in place); {configured path: pin} of each."""
    pins = {}
    for key in KEYS:
        source = config["prompts"][key]
        if Path(source).parent.name == FOLDER and Path(source).name.startswith(f"{key}-"):
            continue  # already a pin (a run's recorded config given back as a config file)
        pins[source] = config["prompts"][key] = pin_path(source, results, key)
    return pins


def migrate_record(record: Path, pins: Mapping[str, str]) -> set[str]:
    """Name the pins instead of the configured files in one Snakemake record; the configured files it named."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return set()  # not a record we can read: Snakemake decides what it makes of it
    if not isinstance(data, dict) or not isinstance(data.get("params"), list):
        return set()
    named = {source for source in pins
             if source in (data.get("input") or []) or any(repr(source) in str(p) for p in data["params"])}
    if not named:
        return set()
    spelled = {repr(source): repr(pins[source]) for source in named}
    data["params"] = [_replaced(p, spelled) if isinstance(p, str) else p for p in data["params"]]
    if isinstance(data.get("input"), list):
        data["input"] = [pins.get(path, path) if isinstance(path, str) else path for path in data["input"]]
    # the configured file's checksum is not the pin's: dropped (Snakemake then compares the pin by its mtime)
    if isinstance(data.get("input_checksums"), dict):
        data["input_checksums"] = {path: value for path, value in data["input_checksums"].items() if path not in pins}
    tmp = record.with_name(record.name + ".rewardloop-tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(record)  # Snakemake never reads half a record
    return named


def _replaced(text: str, spelled: Mapping[str, str]) -> str:
    for old, new in spelled.items():
        text = text.replace(old, new)
    return text


def migrate_records(metadata: Path, pins: Mapping[str, str]) -> int:
    """Rewrite Snakemake's records under ``metadata`` once to name the pins, and write the pins they name (see the
    module's docstring); how many configured files the records named."""
    marker = metadata.parent / MARKER
    if marker.exists() or not metadata.is_dir():
        return 0
    named = set()  # the configured files that some record names
    for path in (p for p in metadata.rglob("*") if p.is_file()):
        named |= migrate_record(path, pins)
    for source in sorted(named):  # their pins, as the finished jobs read them (written before the next plan)
        if not Path(pins[source]).is_file():
            write_pin(source, pins[source])
    marker.write_text("Snakemake's records here name pinned prompt sets (rewardloop.runtime.prompt_pins)\n")
    return len(named)
