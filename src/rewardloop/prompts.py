"""Prompt files: plain text (one prompt per line) or JSONL with a ``prompt`` field.

Each prompt gets a stable ``prompt_id``: the JSONL ``id`` field when present, else ``p`` plus the
zero-padded line number, so ids survive reordering of JSONL files and are readable in tables.
Ids name samples (``<iteration>-<prompt_id>-<group>``) and keys in latents.safetensors
(``prompt_embeds/<prompt_id>``), so an id with a path separator or ``..`` is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd


class PromptFileError(ValueError):
    pass


def require_file(path: Path, where: str) -> None:
    """Refuse what is not a readable file, saying which: absent, or a folder where a file was expected."""
    if path.is_dir():
        raise PromptFileError(f"{where}: a folder, not a prompt file (give the file in it)")
    if not path.is_file():
        raise PromptFileError(f"{where}: file not found")


def load_prompts(path: str | Path, key: str = "prompts") -> pd.DataFrame:
    """Return a DataFrame with columns prompt_id, prompt; errors name ``key`` and the file."""
    path = Path(path)
    where = f"{key} ({path})"
    require_file(path, where)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM (Windows editors write one) is not prompt text
    except UnicodeDecodeError as exc:
        raise PromptFileError(f"{where}: not UTF-8 text ({exc})") from exc
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)]
    lines = [(n, line) for n, line in lines if line]
    if not lines:
        raise PromptFileError(f"{where}: no prompts in file")
    if path.suffix == ".jsonl":
        rows = [_jsonl_row(n, line, where) for n, line in lines]
    else:
        rows = [(f"p{n:05d}", line) for n, line in lines]
    first_line = {}
    for (n, _), (prompt_id, _) in zip(lines, rows):
        if prompt_id in first_line:
            raise PromptFileError(f"{where}: line {n}: duplicate prompt id {prompt_id!r} (first on line "
                                  f"{first_line[prompt_id]})")
        first_line[prompt_id] = n
    return pd.DataFrame(rows, columns=["prompt_id", "prompt"])


def shared_prompts(train: pd.DataFrame, held_out: pd.DataFrame) -> list[tuple[str, str]]:
    """``(held-out id, train id)`` of each held-out prompt that is also a train prompt, in the held-out
    file's order; prompts compare ignoring case and runs of spaces (as a tokenizer reads them)."""
    def text(prompt: str) -> str:
        return " ".join(prompt.split()).casefold()

    train_ids: dict[str, str] = {}
    for prompt_id, prompt in zip(train.prompt_id, train.prompt):
        train_ids.setdefault(text(prompt), prompt_id)
    return [(prompt_id, train_ids[text(prompt)]) for prompt_id, prompt in zip(held_out.prompt_id, held_out.prompt)
            if text(prompt) in train_ids]


def check_id(prompt_id: str) -> str | None:
    """Why ``prompt_id`` cannot name samples and tensor keys, or None when it can."""
    if not prompt_id.strip():
        return "is empty"
    if "/" in prompt_id or "\\" in prompt_id:
        return "contains a path separator"
    if ".." in prompt_id:
        return "contains '..'"
    if not prompt_id.isprintable():
        return "contains a control character"
    return None


def _jsonl_row(line_no: int, line: str, where: str) -> tuple[str, str]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PromptFileError(f"{where}: line {line_no} is not valid JSON ({exc})") from exc
    if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
        raise PromptFileError(f"{where}: line {line_no} has no string field 'prompt'")
    if not record["prompt"].strip():
        raise PromptFileError(f"{where}: line {line_no} has an empty 'prompt'")
    prompt_id = str(record.get("id", f"p{line_no:05d}"))
    problem = check_id(prompt_id)
    if problem:
        raise PromptFileError(f"{where}: line {line_no}: prompt id {prompt_id!r} {problem} (ids name samples "
                              "and tensor keys)")
    return prompt_id, record["prompt"].strip()


def select_prompts(table: pd.DataFrame, count: int | None, seed: int, iteration: int) -> pd.DataFrame:
    """The iteration's rollout prompts: a seeded draw without replacement (all when count is None)."""
    if count is None or count >= len(table):
        return table.reset_index(drop=True)
    rng = np.random.default_rng([seed, iteration])
    chosen = np.sort(rng.choice(len(table), size=count, replace=False))
    return table.iloc[chosen].reset_index(drop=True)
