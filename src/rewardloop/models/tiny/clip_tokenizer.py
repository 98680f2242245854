"""An offline CLIP-style BPE tokenizer for the synthetic caption vocabulary.

The vocabulary follows CLIP's layout: the 256 byte-level characters, the same with the
end-of-word marker ``</w>``, one merged token per merge rule, then ``<|startoftext|>`` and
``<|endoftext|>``. Merge rules are generated so every caption word is a single token, while any
other text still tokenizes (into byte-level pieces).

Always load with ``CLIPTokenizer.from_pretrained(dir)``: in transformers 5 constructing
``CLIPTokenizer(vocab_file=..., merges_file=...)`` directly yields a broken tokenizer.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Iterable

from rewardloop.models.tiny import synthetic

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


def caption_token_counts(prompts: Iterable[str]) -> list[int] | None:
    """Each prompt's token count under :func:`build_tokenizer`'s tokenizer (start and end included), without
    building it, when every prompt is caption words (ASCII letters, any case) between spaces; else None.

    Each caption word is one token (:func:`build_merges`) and spaces are no token, so such a prompt is its
    word count plus 2: the counts the tokenizer gives (tests/unit/models/test_prompt_lengths.py), for the
    startup's prompt-length check without importing transformers and writing a tokenizer (1-2 s).
    """
    vocabulary = set(caption_words())
    counts = []
    for prompt in prompts:
        words = [word for word in prompt.split(" ") if word]
        if not words or not all(word.isascii() and word.lower() in vocabulary for word in words):
            return None
        counts.append(len(words) + 2)
    return counts


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


# --- CLIP's real vocabulary (for replicas of published checkpoints) --------------------------
#
# open_clip ships OpenAI CLIP's BPE merge list (bpe_simple_vocab_16e6.txt.gz). CLIP uses its first
# 48,894 merges; its vocabulary is the 256 byte characters, the same with "</w>", one token per
# merge, then <|startoftext|> (49406) and <|endoftext|> (49407): 49,408 tokens. Written the way
# the published tokenizer folders hold them, vocab.json and merges.txt come out byte-identical
# to SD1.5's and SDXL's (published.CLIP_VOCAB_GIT_BLOB / CLIP_MERGES_GIT_BLOB).

CLIP_VOCAB_SIZE = 49408
CLIP_MERGE_COUNT = CLIP_VOCAB_SIZE - 2 * 256 - 2  # 48,894


def clip_bpe_merges() -> list[str]:
    """CLIP's merge rules ("a b" lines, in rank order), read from the open_clip wheel."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("open_clip")  # locate the wheel's data without importing it (torch, timm)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("open_clip (open-clip-torch) is not installed: it ships CLIP's BPE merges")
    path = Path(next(iter(spec.submodule_search_locations))) / "bpe_simple_vocab_16e6.txt.gz"
    lines = gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")
    return lines[1 : 1 + CLIP_MERGE_COUNT]  # line 0 is the file's version header


def clip_vocab(merges: list[str] | None = None) -> dict[str, int]:
    merges = clip_bpe_merges() if merges is None else merges
    base = list(bytes_to_unicode().values())
    tokens = base + [c + "</w>" for c in base] + [m.replace(" ", "") for m in merges] + [BOS, EOS]
    return {token: i for i, token in enumerate(tokens)}


def write_clip_vocab(out_dir: str | Path) -> None:
    """Write CLIP's vocab.json and merges.txt into ``out_dir``, formatted as the published files."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab, merges = _clip_vocab_files()
    (out_dir / "vocab.json").write_bytes(vocab)
    (out_dir / "merges.txt").write_bytes(merges)


@functools.lru_cache(maxsize=1)
def _clip_vocab_files() -> tuple[bytes, bytes]:
    merges = clip_bpe_merges()
    vocab = json.dumps(clip_vocab(merges), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return vocab.encode("utf-8"), ("#version: 0.2\n" + "".join(m + "\n" for m in merges)).encode("utf-8")


def write_clip_tokenizer(out_dir: str | Path, tokenizer_config: dict, special_tokens_map: dict):
    """A published-layout CLIP tokenizer folder (vocab.json, merges.txt, tokenizer_config.json,
    special_tokens_map.json); returns it loaded with ``CLIPTokenizer.from_pretrained``."""
    from transformers import CLIPTokenizer

    out_dir = Path(out_dir)
    write_clip_vocab(out_dir)
    for name, data in (("tokenizer_config.json", tokenizer_config), ("special_tokens_map.json", special_tokens_map)):
        (out_dir / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tokenizer = CLIPTokenizer.from_pretrained(out_dir)
    if len(tokenizer) != CLIP_VOCAB_SIZE:
        raise RuntimeError(f"{out_dir}: CLIP tokenizer has {len(tokenizer)} tokens, expected {CLIP_VOCAB_SIZE}")
    return tokenizer
