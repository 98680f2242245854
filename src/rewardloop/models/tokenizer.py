"""An offline CLIP-style BPE tokenizer for the synthetic caption vocabulary.

The vocabulary follows CLIP's layout: the 256 byte-level characters, the same with the
end-of-word marker ``</w>``, one merged token per merge rule, then ``<|startoftext|>`` and
``<|endoftext|>``. Merge rules are generated so every caption word is a single token, while any
other text still tokenizes (into byte-level pieces).

Always load with ``CLIPTokenizer.from_pretrained(dir)``: in transformers 5 constructing
``CLIPTokenizer(vocab_file=..., merges_file=...)`` directly yields a broken tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from rewardloop.models import synthetic

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
MAX_LENGTH = 16  # must equal the text encoder's max_position_embeddings


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's reversible byte -> printable unicode character map."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    keep += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(keep, map(chr, chars)))


def caption_words() -> list[str]:
    """Every word that occurs in a synthetic caption."""
    words = {"a", "an", "on", "background", *synthetic.COLORS, *synthetic.SHAPES}
    return sorted(words)


def _symbols(word: str) -> tuple[str, ...]:
    return tuple(word[:-1]) + (word[-1] + "</w>",)


def _bpe(word: str, ranks: dict[tuple[str, str], int]) -> tuple[str, ...]:
    """CLIP's BPE on one (ASCII) word: repeatedly merge the lowest-ranked adjacent pair."""
    parts = _symbols(word)
    while len(parts) > 1:
        pairs = [(ranks.get(p, 1 << 30), i) for i, p in enumerate(zip(parts, parts[1:]))]
        rank, _ = min(pairs)
        if rank == 1 << 30:
            break
        first, second = next(p for p in zip(parts, parts[1:]) if ranks.get(p) == rank)
        merged, i = [], 0
        while i < len(parts):
            if i < len(parts) - 1 and (parts[i], parts[i + 1]) == (first, second):
                merged.append(first + second)
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = tuple(merged)
    return parts


def build_merges(words: Iterable[str]) -> list[tuple[str, str]]:
    """Merge rules under which each word BPE-encodes to one token.

    Rules are appended greedily (merge the first two remaining pieces); an appended rule has the
    lowest priority, so it never changes a word that is already a single token.
    """
    merges: list[tuple[str, str]] = []
    ranks: dict[tuple[str, str], int] = {}
    for word in words:
        while len(parts := _bpe(word, ranks)) > 1:
            pair = (parts[0], parts[1])
            ranks[pair] = len(merges)
            merges.append(pair)
    return merges


def build_tokenizer(out_dir: str | Path, words: Iterable[str] | None = None, max_length: int = MAX_LENGTH):
    """Write a CLIP tokenizer for ``words`` (default: the caption vocabulary) and load it back."""
    from transformers import CLIPTokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    merges = build_merges(words if words is not None else caption_words())
    base = list(bytes_to_unicode().values())
    tokens = base + [c + "</w>" for c in base] + ["".join(m) for m in merges] + [BOS, EOS]
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(tokens))}
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (out_dir / "merges.txt").write_text(
        "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8"
    )
    config = {
        "tokenizer_class": "CLIPTokenizer",
        "model_max_length": max_length,
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": EOS,
        "pad_token": EOS,
        "do_lower_case": True,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    tokenizer = CLIPTokenizer.from_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return CLIPTokenizer.from_pretrained(out_dir)
