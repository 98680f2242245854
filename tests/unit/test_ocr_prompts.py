"""The shipped OCR prompt set (resources/prompts/ocr_{train,test}.jsonl) and its generator (tools/ocr_prompts.py)."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

import rewardloop

from workflow_helpers import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import ocr_prompts  # noqa: E402  (tools/, not the package: a generator nothing imports at run time)
from rewardloop.prompts import check_id, load_prompts  # noqa: E402
from rewardloop.rewards.ocr import OCRReward, extract_target, normalise  # noqa: E402

SHIPPED = {name: ROOT / "resources" / "prompts" / file for name, file in ocr_prompts.FILE_NAMES.items()}
SIZES = {"train": ocr_prompts.TRAIN_TARGETS * ocr_prompts.USES_PER_TRAIN_TARGET, "test": ocr_prompts.TEST_TARGETS}
# CLIP's pre-tokenisation (lower-cased): a letter run, one digit, a punctuation run; BPE makes at
# least one token of each, and common words exactly one
_CLIP_PIECES = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d|[^\W\d_]+|\d|[^\s\w]+|_")


@pytest.fixture(scope="module")
def tables():
    return {name: load_prompts(path, key=f"prompts.{name}") for name, path in SHIPPED.items()}


def test_shipped_files_equal_a_fresh_generation(tmp_path):
    written = ocr_prompts.write(tmp_path)
    for name, path in SHIPPED.items():
        assert written[name].name == path.name
        assert path.read_bytes() == written[name].read_bytes(), (
            f"{path} differs from a fresh generation: python tools/ocr_prompts.py --out-dir resources/prompts")
    fresh = ocr_prompts.generate()
    assert ocr_prompts.to_jsonl(fresh["test"]).encode("ascii") == SHIPPED["test"].read_bytes()  # same in-process


def test_cli_writes_the_files(tmp_path, capsys):
    assert ocr_prompts.main(["--out-dir", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "ocr_train.jsonl").read_bytes() == SHIPPED["train"].read_bytes()
    assert "train: 20000 prompts" in capsys.readouterr().out


def test_sizes_and_line_format():
    assert SIZES == {"train": 20000, "test": 1000}
    assert len(ocr_prompts.TEMPLATES) >= 40
    for name, path in SHIPPED.items():
        lines = path.read_text(encoding="ascii").splitlines()
        assert len(lines) == SIZES[name]
        for number, line in enumerate(lines):
            record = json.loads(line)
            assert list(record) == ["id", "prompt"]
            assert record["id"] == f"ocr-{name}-{number:05d}"


def test_prompts_load_and_pass_the_ocr_check(tables):
    for name, table in tables.items():
        assert len(table) == SIZES[name]
        assert table.prompt_id.is_unique and table.prompt.is_unique
        assert all(check_id(i) is None for i in table.prompt_id)
        OCRReward.check_prompts(list(table.prompt))  # the reward's own check (raises on a miss)


def test_each_prompt_has_one_quoted_target_the_reward_extracts(tables):
    for table in tables.values():
        for prompt in table.prompt:
            assert prompt.isascii() and prompt.count('"') == 2, prompt
            quoted = prompt.split('"')[1]
            assert extract_target(prompt) == quoted and normalise(quoted), prompt
            assert len(prompt.split()) <= ocr_prompts.MAX_WORDS, prompt
            assert len(_CLIP_PIECES.findall(prompt.lower())) <= 40, prompt  # CLIP reads 77 tokens


def test_held_out_targets_are_disjoint_from_train(tables):
    targets = {name: [extract_target(p) for p in table.prompt] for name, table in tables.items()}
    train = {normalise(t) for t in targets["train"]}
    test = {normalise(t) for t in targets["test"]}
    assert len(test) == ocr_prompts.TEST_TARGETS == len(targets["test"])  # each held-out target once
    assert len(train) == ocr_prompts.TRAIN_TARGETS
    assert not train & test  # disjoint even after the reward's normalisation (case, spaces)
    assert len(set(targets["train"])) == ocr_prompts.TRAIN_TARGETS  # one spelling per target


def test_train_targets_appear_in_different_templates(tables):
    by_target: dict[str, set[str]] = {}
    for prompt in tables["train"].prompt:
        target = extract_target(prompt)
        by_target.setdefault(target, set()).add(prompt.replace(f'"{target}"', '"{t}"'))
    assert {len(v) for v in by_target.values()} == {ocr_prompts.USES_PER_TRAIN_TARGET}
    used = {re.sub(r'"[^"]*"', '""', p) for t in tables.values() for p in t.prompt}
    assert len(used) > len(ocr_prompts.TEMPLATES)  # templates and their slot fillings vary


def test_generation_depends_on_the_seed():
    assert ocr_prompts.generate(1)["test"] != ocr_prompts.generate(0)["test"]


def test_the_generator_is_a_tool_outside_the_package():
    """The package never imports it (the workflow reads the shipped files), and it needs nothing of the package."""
    assert not (Path(rewardloop.__file__).parent / "ocr_prompts.py").exists()
    tree = ast.parse(Path(ocr_prompts.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not {name for name in imported if name.split(".")[0] == "rewardloop"}
