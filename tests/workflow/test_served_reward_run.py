"""A run whose reward is served from another environment: the OCR reward's paddleocr backend, which
conflicts with this environment's opencv, served from its own venv by tests/paddleocr_ci.sh, which sets
REWARDLOOP_PADDLE_OCR_URL to the server's address (skipped without it, as in `make test`)."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from rewardloop.artifacts import read_provenance, read_table

from workflow_helpers import ROOT, planned_jobs, snakemake, tiny_overlay, write_overlay

pytestmark = pytest.mark.workflow

URL_ENV = "REWARDLOOP_PADDLE_OCR_URL"


def first_lines(source, count: int, dest):
    dest.write_text("".join(source.read_text().splitlines(keepends=True)[:count]))
    return str(dest)


@pytest.mark.skipif(not os.environ.get(URL_ENV), reason=f"needs the paddleocr server of tests/paddleocr_ci.sh ({URL_ENV})")
def test_a_run_scores_with_paddleocr_served_from_its_own_venv(tiny_model, tmp_path):
    work = tmp_path / "run"
    work.mkdir()
    prompts = {key: first_lines(ROOT / f"resources/prompts/ocr_{key}.jsonl", 4, tmp_path / f"{key}.jsonl")
               for key in ("train", "test")}
    write_overlay(work, tiny_overlay(
        tiny_model, iterations=1, tracking={"enabled": False},
        # the tiny model renders no text (OCR scores 0 throughout): a local reward beside it gives DPO its pairs
        rewards={"color_match": None, "jpeg_compressibility": 1.0,
                 "ocr": {"weight": 1.0, "remote": {"url": os.environ[URL_ENV]}}},
        prompts={"train": prompts["train"], "eval": prompts["test"]},
        generate={"prompts_per_iteration": 4, "images_per_prompt": 2}))
    snakemake(work)

    results = work / "results"
    for table, rows in (("iter_000/scores.parquet", 8), ("iter_000/eval.parquet", 4), ("base/eval.parquet", 4)):
        scored = read_table(results / table).to_pandas()
        assert len(scored) == rows and scored.reward_ocr.between(0, 1).all(), table
        assert all("ocr" in json.loads(details) for details in scored.reward_details), table
    # the run's identity of the reward is what the server says it serves: the paddleocr backend
    served = json.loads(read_provenance(results / "iter_000/scores.parquet")["inputs"]["rewards.ocr.remote"])
    assert served["reward"] == "ocr" and served["options"]["backend"] == "paddleocr", served
    assert planned_jobs(snakemake(work, "-n")) == Counter()  # the same server again: nothing to rerun
