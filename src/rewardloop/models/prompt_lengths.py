"""Prompts longer than a text encoder takes: counted at startup with the model's own tokenizers.

CLIP encoders take 77 tokens (start and end included) and the SD3 pipeline gives T5 256; the
pipelines cut what is longer without a word, so two prompts that share a long prefix get the same
embedding. ``prompts.too_long`` says what to do: ``warn`` (one line per prompt and encoder with its
token count and the limit; the prompt is still cut), ``error`` (stop before any job) or
``truncate`` (cut silently).
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

MAX_LINES = 20  # warn: lines printed before a count of the rest
CACHE = Path(".snakemake/rewardloop/token_counts")  # relative to the working directory


@dataclass(frozen=True)
class LongPrompt:
    key: str  # prompts.train or prompts.eval
    prompt_id: str
    tokenizer: str  # the pipeline component, e.g. tokenizer_3
    tokens: int
    limit: int

    def line(self) -> str:
        return (f"rewardloop: {self.key}: prompt {self.prompt_id} is {self.tokens} tokens for {self.tokenizer} "
                f"(limit {self.limit}); the text encoder reads only the first {self.limit}")


def tokenizers(model_cfg: Mapping) -> dict[str, tuple[object, int]]:
    """{component: (tokenizer, token limit)} of the model's text encoders; {} for a hub id not on disk."""
    from rewardloop.models.families import get_family

    family = get_family(model_cfg["family"])
    if model_cfg.get("build_tiny"):  # the CLIP tokenizer the tiny builders write; their T5, if any, is not built yet
        return _tiny_tokenizers(tuple(n for n in family.tokenizers if n not in family.sequence_lengths))
    folder = Path(model_cfg["path"])
    if not folder.is_dir():
        return {}
    return _folder_tokenizers(str(folder.resolve()), family.tokenizers, tuple(family.sequence_lengths.items()))


@functools.lru_cache(maxsize=4)
def _folder_tokenizers(folder: str, names: tuple[str, ...], sequence_lengths: tuple = ()) -> dict[str, tuple[object, int]]:
    from transformers import AutoTokenizer

    lengths = dict(sequence_lengths)
    found = {}
    for name in names:
        if (Path(folder) / name).is_dir():
            tokenizer = AutoTokenizer.from_pretrained(Path(folder) / name)
            # T5: the pipeline's max_sequence_length, not the tokenizer's 512
            found[name] = (tokenizer, min(lengths.get(name, tokenizer.model_max_length), tokenizer.model_max_length))
    return found


@functools.lru_cache(maxsize=1)
def _tiny_tokenizers(names: tuple[str, ...]) -> dict[str, tuple[object, int]]:
    """The embedded tiny model's tokenizer (built by a rule later; it is a pure function of nothing)."""
    from rewardloop.models.tokenizer import build_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(tmp)
    return {name: (tokenizer, tokenizer.model_max_length) for name in names}


def long_prompts(config: Mapping) -> list[LongPrompt]:
    """Every (prompt, tokenizer) pair of prompts.train and prompts.eval over the tokenizer's limit."""
    from rewardloop.prompts import load_prompts

    found = []
    tables = {key: load_prompts(config["prompts"][key], key=f"prompts.{key}") for key in ("train", "eval")}
    counted = _tiny_counts(config["model"], tables)
    loaded = counted[0] if counted else tokenizers(config["model"])
    for key, table in tables.items():
        for name, (tokenizer, limit) in loaded.items():
            counts = counted[1][key] if counted else token_counts(tokenizer, tuple(table.prompt))
            found += [LongPrompt(f"prompts.{key}", pid, name, n, limit)
                      for pid, n in zip(table.prompt_id, counts) if n > limit]
    return found


def _tiny_counts(model_cfg: Mapping, tables: Mapping) -> tuple[dict, dict[str, list[int]]] | None:
    """({component: (None, token limit)}, {key: token counts}) of the tiny model's tokenizer, counted without
    building it (the caption-word prompts of tokenizer.caption_token_counts); None to count with the tokenizer."""
    from rewardloop.models.families import get_family
    from rewardloop.models.tokenizer import MAX_LENGTH, caption_token_counts

    if not model_cfg.get("build_tiny"):
        return None
    counts = {key: caption_token_counts(table.prompt) for key, table in tables.items()}
    if any(value is None for value in counts.values()):
        return None
    family = get_family(model_cfg["family"])
    names = tuple(n for n in family.tokenizers if n not in family.sequence_lengths)  # as _tiny_tokenizers
    return {name: (None, MAX_LENGTH) for name in names}, counts


def token_counts(tokenizer, prompts: tuple[str, ...]) -> list[int]:
    """Token count of each prompt, cached under .snakemake/ by the tokenizer's files and the prompts (a
    recipe's 20,000 prompts take seconds to tokenize, at every snakemake start)."""
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(prompts).encode())
    for file in sorted(Path(tokenizer.name_or_path).glob("*")) if Path(tokenizer.name_or_path).is_dir() else []:
        digest.update(file.name.encode() + file.read_bytes())
    cache = CACHE / f"{digest.hexdigest()[:32]}.json"
    if Path(tokenizer.name_or_path).is_dir() and cache.is_file():
        return json.loads(cache.read_text())
    counts = [len(ids) for ids in tokenizer(list(prompts), truncation=False).input_ids]
    if Path(tokenizer.name_or_path).is_dir():
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(counts))
        except OSError:
            pass  # a read-only working directory: count again next time
    return counts


def warning_lines(found: list[LongPrompt]) -> list[str]:
    lines = [p.line() for p in found[:MAX_LINES]]
    if len(found) > MAX_LINES:
        lines.append(f"rewardloop: ... and {len(found) - MAX_LINES} more over-long prompt(s) "
                     "(prompts.too_long: error lists none and stops; truncate says nothing)")
    return lines
