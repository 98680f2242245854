"""Silent input changes: over-long prompts are named at startup (prompts.too_long), a BOM is not text."""

from __future__ import annotations

import json
import os

import pytest
import torch

from rewardloop.config import ConfigError, load, startup_warnings
from rewardloop.models.prompt_lengths import MAX_LINES, long_prompts, warning_lines
from rewardloop.prompts import load_prompts

from workflow_helpers import ROOT

SHORT = "a red circle on a blue background"
PREFIX = "a poster of " + "a very tall tower and " * 20  # ~120 CLIP tokens, ~150 T5 tokens
T5_LONG = "a poster of " + "a very tall tower and " * 60  # over T5's 256 as well (~304 tokens)


@pytest.fixture(scope="module")
def sd3_replica(tmp_path_factory):
    from rewardloop.models.replicas import build_replica

    folder = tmp_path_factory.mktemp("replica") / "sd3"
    build_replica("sd3", folder)
    return folder


def sd3_config(tmp_path, replica, train_lines, too_long="warn"):
    return load(ROOT / "config.yaml", sd3_overrides(tmp_path, replica, train_lines, too_long))


def sd3_overrides(tmp_path, replica, train_lines, too_long="warn") -> dict:
    (tmp_path / "train.txt").write_text("\n".join(train_lines) + "\n")
    (tmp_path / "eval.txt").write_text("a green square on a red background\n")  # held out: not one of the train lines
    return {
        "model": {"family": "sd3", "path": str(replica), "build_tiny": False}, "train": {"loss": "grpo"},
        "rewards": {"color_match": None, "jpeg_compressibility": 1.0}, "generate": {"resolution": 64},
        "prompts": {"train": str(tmp_path / "train.txt"), "eval": str(tmp_path / "eval.txt"), "too_long": too_long}}


def test_a_bom_is_not_part_of_the_first_prompt(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_bytes("\ufeff".encode() + f"{SHORT}\nsecond\n".encode())
    assert load_prompts(path).prompt.tolist() == [SHORT, "second"]
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_bytes("\ufeff".encode() + b'{"id": "a", "prompt": "x"}\n')
    assert load_prompts(jsonl).prompt_id.tolist() == ["a"]


def test_over_long_prompts_are_named_per_text_encoder_with_their_counts(tmp_path, sd3_replica):
    cfg = sd3_config(tmp_path, sd3_replica, [SHORT, PREFIX + "a red door", T5_LONG])
    found = long_prompts(cfg)
    by_encoder = {(p.prompt_id, p.tokenizer): p for p in found}
    assert set(by_encoder) == {("p00002", "tokenizer"), ("p00002", "tokenizer_2"), ("p00003", "tokenizer"),
                               ("p00003", "tokenizer_2"), ("p00003", "tokenizer_3")}
    assert {p.limit for p in found if p.tokenizer != "tokenizer_3"} == {77}
    assert by_encoder["p00003", "tokenizer_3"].limit == 256
    from transformers import CLIPTokenizer

    clip = CLIPTokenizer.from_pretrained(sd3_replica / "tokenizer")
    assert by_encoder["p00002", "tokenizer"].tokens == len(clip(PREFIX + "a red door").input_ids)
    lines = startup_warnings(cfg)
    n = len(clip(PREFIX + "a red door").input_ids)
    assert len(lines) == 5 and lines[0] == (f"rewardloop: prompts.train: prompt p00002 is {n} tokens for tokenizer "
                                            "(limit 77); the text encoder reads only the first 77")


def test_too_long_error_stops_and_truncate_says_nothing(tmp_path, sd3_replica):
    with pytest.raises(ConfigError, match=r"prompts\.train \(.*train\.txt\): prompt p00002 is \d+ tokens for "
                                          r"tokenizer, over its limit of 77 \(2 over-long in all"):
        sd3_config(tmp_path, sd3_replica, [SHORT, PREFIX + "a red door"], too_long="error")
    assert startup_warnings(sd3_config(tmp_path, sd3_replica, [SHORT, PREFIX + "x"], too_long="truncate")) == []


@torch.no_grad()
def test_what_is_flagged_is_what_the_pipeline_cuts(sd3_replica):
    """Two prompts that differ only after CLIP's 77 tokens get the same CLIP embedding: the reason to warn."""
    from rewardloop.models import loading as models
    from rewardloop.models.families import get_family

    pipe = models.load_pipeline({"family": "sd3", "path": str(sd3_replica)})
    pipe.text_encoder_3 = pipe.tokenizer_3 = None  # CLIP's part alone
    embeds = get_family("sd3").encode(pipe, [PREFIX + "a red door", PREFIX + "a blue window"])["prompt_embeds"]
    # Equal to rounding: the two rows of one batch may take different kernel paths (measured on an Intel Xeon
    # with AVX-512 at one thread: 1.2e-7 apart), while the same endings inside the 77 tokens differ by ~0.7.
    torch.testing.assert_close(embeds[0], embeds[1], rtol=0, atol=1e-5)
    inside = get_family("sd3").encode(pipe, ["a red door", "a blue window"])["prompt_embeds"]
    assert (inside[0] - inside[1]).abs().max() > 0.1


def test_the_default_run_has_no_over_long_prompt_and_many_are_summarised():
    cfg = load(ROOT / "config.yaml", {"model": {"build_tiny": True}})
    assert long_prompts(cfg) == [] and startup_warnings(cfg) == []
    from rewardloop.models.prompt_lengths import LongPrompt

    many = [LongPrompt("prompts.train", f"p{i}", "tokenizer", 80, 77) for i in range(MAX_LINES + 5)]
    lines = warning_lines(many)
    assert len(lines) == MAX_LINES + 1 and lines[-1].startswith("rewardloop: ... and 5 more over-long prompt(s)")


def test_caption_word_prompts_are_counted_as_the_tiny_tokenizer_counts_them(tmp_path):
    """The startup counts the tiny model's prompts without building its tokenizer (issue 33): the same counts."""
    from rewardloop.models.tiny.clip_tokenizer import build_tokenizer, caption_token_counts

    tokenizer = build_tokenizer(tmp_path / "tok")
    prompts = [*load_prompts(ROOT / "resources/prompts/train.txt").prompt,
               *load_prompts(ROOT / "resources/prompts/eval.txt").prompt,
               "A RED Circle on a  blue background", " a red square ", "red " * 20 + "circle"]
    assert caption_token_counts(prompts) == [len(ids) for ids in tokenizer(prompts, truncation=False).input_ids]
    for other in ("a red circle, on a blue background", "a redd circle", "a red\tcircle", "a \u212aed circle", ""):
        assert caption_token_counts(["a red circle", other]) is None  # counted by the tokenizer itself


def test_a_second_start_reads_the_counts_from_the_cache_and_a_changed_tokenizer_is_counted_again(tmp_path, sd3_replica):
    """Loading a tokenizer imports transformers and torch (4 of the 5 s of every `snakemake -n`): counts are kept
    by the tokenizer files' bytes and the prompts, and a start that finds them imports neither."""
    import shutil
    import subprocess
    import sys

    replica = tmp_path / "replica"
    shutil.copytree(sd3_replica, replica)
    overrides = sd3_overrides(tmp_path, replica, [SHORT, PREFIX + "a red door", T5_LONG])
    probe = (f"import json, sys; from rewardloop.config import load; from rewardloop.models.prompt_lengths import "
             f"long_prompts; cfg = load({str(ROOT / 'config.yaml')!r}, json.loads(sys.argv[1])); found = long_prompts(cfg); "
             f"print(json.dumps([[p.prompt_id, p.tokenizer, p.tokens, p.limit] for p in found])); "
             f"print('transformers' in sys.modules)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}

    def start() -> tuple[list, bool]:
        out = subprocess.run([sys.executable, "-c", probe, json.dumps(overrides)], env=env, capture_output=True, text=True,
                             check=True).stdout.splitlines()
        return json.loads(out[-2]), out[-1] == "True"

    expected = [[p.prompt_id, p.tokenizer, p.tokens, p.limit] for p in long_prompts(load(ROOT / "config.yaml", overrides))]
    assert start() == (expected, True)  # counted: the tokenizers were loaded
    assert start() == (expected, False)  # the same files and prompts: read back, transformers never imported
    config_file = replica / "tokenizer_3" / "tokenizer_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "model_max_length": 200}))
    found, loaded = start()  # T5's own limit is now under the pipeline's 256: counted again, with it
    assert loaded and {p[3] for p in found if p[1] == "tokenizer_3"} == {200}
