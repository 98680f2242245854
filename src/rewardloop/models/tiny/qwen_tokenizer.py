"""A Qwen2 tokenizer folder in the published layout, written here without a download (Qwen-Image's replicas).

Qwen-Image's ``tokenizer/`` is Qwen2.5-VL's byte-level BPE: a vocabulary of 151,643 tokens with their merges
(vocab.json 2.8 MB, merges.txt 1.7 MB), then the special tokens at ids 151643 onwards (<|endoftext|>,
<|im_start|>, <|im_end|>, ...; ``added_tokens_decoder`` of its tokenizer_config.json). Nothing may be
downloaded, so a replica's vocabulary is the 256 byte tokens alone with no merges (every byte of a prompt is
a token: the chat template and the prompts tokenize, only into more tokens), and the special tokens at their
published ids, so the ids the pipeline meets (the template's <|im_start|>, the padding <|endoftext|>) are the
published ones and fall inside the text encoder's published embedding table. The published JSON files of the
folder are written verbatim beside them. (The byte tokens' ids are not the published ones: no id below 151643
means the same thing as in the real vocabulary, which a random-weight replica does not need.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping


def byte_tokens() -> list[str]:
    """The 256 byte-level BPE symbols (GPT-2's printable stand-in for each byte), in byte order."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return list(bytes_to_unicode().values())


def write_qwen2_tokenizer(out_dir: str | Path, files: Mapping[str, dict]):
    """A Qwen2 tokenizer folder at ``out_dir`` from the published JSON files of the folder (``files``: name ->
    dict, tokenizer_config.json among them); returns it loaded with ``AutoTokenizer.from_pretrained``."""
    from transformers import AutoTokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = {entry["content"]: int(token_id)
                for token_id, entry in files["tokenizer_config.json"].get("added_tokens_decoder", {}).items()}
    vocab = {token: i for i, token in enumerate(byte_tokens())}
    clash = [token for token, token_id in specials.items() if token_id < len(vocab)]
    if clash:
        raise ValueError(f"tokenizer_config.json: special tokens {clash} have ids below {len(vocab)} (the byte tokens')")
    vocab.update(specials)  # at their published ids: the BPE model reads them as tokens of the vocabulary
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (out_dir / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    for name, data in files.items():
        (out_dir / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    wrong = {token: tokenizer.convert_tokens_to_ids(token) for token, token_id in specials.items()
             if tokenizer.convert_tokens_to_ids(token) != token_id}
    if wrong:
        raise RuntimeError(f"{out_dir}: special tokens at other ids than published: {wrong}")
    return tokenizer
