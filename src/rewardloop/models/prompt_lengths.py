"""Prompts longer than a text encoder takes: counted at startup with the model's own tokenizers.

CLIP encoders take 77 tokens (start and end included) and the SD3 pipeline gives T5 256; the
pipelines cut what is longer without a word, so two prompts that share a long prefix get the same
embedding. ``prompts.too_long`` says what to do: ``warn`` (one line per prompt and encoder with its
token count and the limit; the prompt is still cut), ``error`` (stop before any job) or
``truncate`` (cut silently).
"""

from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

MAX_LINES = 20  # warn: lines printed before a count of the rest


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
        tokenizer = _tiny_tokenizer()
        return {name: (tokenizer, tokenizer.model_max_length) for name in _tiny_names(family)}
    folder = Path(model_cfg["path"])
    return {name: _load(folder / name, family.sequence_lengths.get(name))
            for name in family.tokenizers if (folder / name).is_dir()}


def _load(folder: Path, sequence_length: int | None) -> tuple[object, int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    # T5: the pipeline's max_sequence_length, not the tokenizer's 512 (nor more than the tokenizer's own)
    return tokenizer, min(sequence_length or tokenizer.model_max_length, tokenizer.model_max_length)


def _tiny_names(family) -> tuple[str, ...]:
    return tuple(n for n in family.tokenizers if n not in family.sequence_lengths)


@functools.lru_cache(maxsize=1)
def _tiny_tokenizer():
    """The embedded tiny model's tokenizer (built by a rule later; it is a pure function of nothing)."""
    from rewardloop.models.tiny.clip_tokenizer import build_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        return build_tokenizer(tmp)


def long_prompts(config: Mapping) -> list[LongPrompt]:
    """Every (prompt, tokenizer) pair of prompts.train and prompts.eval over the tokenizer's limit."""
    from rewardloop.prompts import load_prompts

    tables = {key: load_prompts(config["prompts"][key], key=f"prompts.{key}") for key in ("train", "eval")}
    prompts = {key: list(table.prompt) for key, table in tables.items()}
    counted = _tiny_counts(config["model"], prompts) if config["model"].get("build_tiny") else \
        _folder_counts(config["model"], prompts)
    return [LongPrompt(f"prompts.{key}", pid, name, n, limit)
            for name, (limit, counts) in counted.items() for key, table in tables.items()
            for pid, n in zip(table.prompt_id, counts[key]) if n > limit]


Counted = dict[str, tuple[int, dict[str, list[int]]]]  # {component: (token limit, {prompts key: token counts})}


def _tiny_counts(model_cfg: Mapping, prompts: Mapping[str, list[str]]) -> Counted:
    """The tiny model's CLIP tokenizer (its T5, if any, is not built yet), counted without building it where
    every prompt is made of caption words (tokenizer.caption_token_counts), else with a tokenizer built aside."""
    from rewardloop.models.families import get_family
    from rewardloop.models.tiny.clip_tokenizer import MAX_LENGTH, caption_token_counts

    counts = {key: caption_token_counts(texts) for key, texts in prompts.items()}
    if any(value is None for value in counts.values()):
        counts = {key: _count(_tiny_tokenizer(), texts) for key, texts in prompts.items()}
    return {name: (MAX_LENGTH, counts) for name in _tiny_names(get_family(model_cfg["family"]))}


def _folder_counts(model_cfg: Mapping, prompts: Mapping[str, list[str]]) -> Counted:
    """The model folder's own tokenizers ({} for a hub id not on disk), read from the cache where their files
    and the prompts were counted before: loading a tokenizer imports transformers and torch (4 of the 5 s a
    `snakemake -n` took on 2 cores), and a recipe's 20,000 prompts take seconds, at every snakemake start."""
    from rewardloop.models.families import get_family

    family = get_family(model_cfg["family"])
    folder = Path(model_cfg["path"])
    return {name: _cached_counts(folder.resolve() / name, family.sequence_lengths.get(name), prompts)
            for name in family.tokenizers if (folder / name).is_dir()}


def _cached_counts(folder: Path, sequence_length: int | None, prompts: Mapping[str, list[str]]):
    """(token limit, {key: counts}) of the tokenizer in ``folder``, cached by its files' bytes and the prompts."""
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps([prompts, sequence_length]).encode())
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(folder)).encode() + b"\0" + file.read_bytes())
    cache = cache_folder() / f"{digest.hexdigest()[:32]}.json"
    try:
        cached = json.loads(cache.read_text())
        return cached["limit"], cached["counts"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not counted yet (or an unreadable entry): count
    tokenizer, limit = _load(folder, sequence_length)
    counts = {key: _count(tokenizer, texts) for key, texts in prompts.items()}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"limit": limit, "counts": counts}))
        tmp.replace(cache)  # two snakemake starts at once never read half an entry
    except OSError:
        pass  # a read-only cache: count again next time
    return limit, counts


def _count(tokenizer, texts: list[str]) -> list[int]:
    return [len(ids) for ids in tokenizer(texts, truncation=False).input_ids] if texts else []


def cache_folder() -> Path:
    """Token counts by content (the tokenizer's files and the prompts), shared by every working directory:
    $XDG_CACHE_HOME/rewardloop/token_counts (~/.cache/rewardloop/token_counts by default)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rewardloop" / "token_counts"


def warning_lines(found: list[LongPrompt]) -> list[str]:
    lines = [p.line() for p in found[:MAX_LINES]]
    if len(found) > MAX_LINES:
        lines.append(f"rewardloop: ... and {len(found) - MAX_LINES} more over-long prompt(s) "
                     "(prompts.too_long: error lists none and stops; truncate says nothing)")
    return lines
