"""A run's prompt sets pinned by their prompts: a rerun is decided by the prompts, never by the file's spelling.

Jobs used to read the configured prompt file itself: its path was in their params and the file among their
inputs, so moving it, or saving it with other line endings, planned the whole run again although every prompt
was the same (issue 46 §7). Now the Snakefile reads each configured prompt file once (``prompts.load_prompts``:
the ids and texts the jobs would read) and the jobs read ``results/prompts/<key>-<digest>.jsonl``, those ids and
texts as JSONL, named by the sha256 of that text. The file is written once and never rewritten (atomically, with
the source's mtime, so pinning a finished run's prompts plans nothing by mtime): the same prompts are the same
file, and nothing reruns; other prompts are another file, and what reads them reruns. A dry run may write a new
pin; it changes nothing that exists.

Records of runs finished before this name the configured file as the jobs' input and in their params:
:func:`migrate_records` rewrites those names once to the pin of the same prompts (the records' other contents
are kept), so an upgrade reruns nothing. A record naming another file than the config's (the file was moved at
the same time) is left as it is: its jobs rerun.
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


def pin(source: str | os.PathLike, results: str | os.PathLike, key: str) -> str:
    """The pin of ``source``'s prompts under ``results`` (written if it is not there yet): its path."""
    text = pinned_text(source, key)
    target = Path(results) / FOLDER / f"{key}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
    if target.is_file():
        return str(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(target) as tmp:
            tmp.write_text(text, encoding="utf-8")
            stat = Path(source).stat()
            os.utime(tmp, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    except OSError as exc:
        raise OSError(f"prompts.{key}: cannot write its pinned copy {target} ({exc.strerror or exc}); the "
                      f"results folder must be writable") from exc
    return str(target)


def pin_config(config: MutableMapping, results: str | os.PathLike = "results") -> dict[str, str]:
    """Point ``config``'s prompt files at their pins (in place); {configured path: pin} of each."""
    pins = {}
    for key in KEYS:
        source = config["prompts"][key]
        if Path(source).parent.name == FOLDER and Path(source).name.startswith(f"{key}-"):
            continue  # already a pin (a run's recorded config given back as a config file)
        pins[source] = config["prompts"][key] = pin(source, results, key)
    return pins


def migrate_record(record: Path, pins: Mapping[str, str]) -> bool:
    """Name the pins instead of the configured files in one Snakemake record; True if it changed."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return False  # not a record we can read: Snakemake decides what it makes of it
    if not isinstance(data, dict) or not isinstance(data.get("params"), list):
        return False
    spelled = {repr(source): repr(pinned) for source, pinned in pins.items()}
    params = [_replaced(p, spelled) if isinstance(p, str) else p for p in data["params"]]
    inputs = data.get("input")
    if isinstance(inputs, list):
        inputs = [pins.get(path, path) if isinstance(path, str) else path for path in inputs]
    # the configured file's checksum is not the pin's: dropped (Snakemake then compares the pin by its mtime)
    checksums = data.get("input_checksums")
    if isinstance(checksums, dict):
        checksums = {path: value for path, value in checksums.items() if path not in pins}
    if params == data["params"] and inputs == data.get("input") and checksums == data.get("input_checksums"):
        return False
    data.update(params=params, input=inputs, input_checksums=checksums)
    tmp = record.with_name(record.name + ".rewardloop-tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(record)  # Snakemake never reads half a record
    return True


def _replaced(text: str, spelled: Mapping[str, str]) -> str:
    for old, new in spelled.items():
        text = text.replace(old, new)
    return text


def migrate_records(metadata: Path, pins: Mapping[str, str]) -> int:
    """Rewrite Snakemake's records under ``metadata`` once to name the pins (see the module's docstring); how
    many changed."""
    marker = metadata.parent / MARKER
    if marker.exists() or not metadata.is_dir():
        return 0
    changed = sum(migrate_record(path, pins) for path in metadata.rglob("*") if path.is_file())
    marker.write_text("Snakemake's records here name pinned prompt sets (rewardloop.runtime.prompt_pins)\n")
    return changed
