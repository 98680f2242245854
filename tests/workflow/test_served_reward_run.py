"""Runs whose reward is served elsewhere: by a server that speaks Flow-Factory's protocol (a stand-in of that
make, tests/unit/rewards/stand_in_servers.py), and the OCR reward's paddleocr backend, which conflicts with
this environment's opencv, served from its own venv by tests/paddleocr_ci.sh, which sets
REWARDLOOP_PADDLE_OCR_URL to the server's address (that test is skipped without it, as in `make test`)."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

import numpy as np

from rewardloop.artifacts import decode_image, read_provenance, read_table

from remote_servers import running, stand_in
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


def test_a_run_scores_with_a_flow_factory_protocol_server(tiny_model, tmp_path):
    """The server's reward (mean pixel level) beside a local one: every rollout's and eval image's served
    score is the level of the image the run saved, the identity is the protocol, URL and health reply."""
    work = tmp_path / "run"
    work.mkdir()
    with running(stand_in("flow_factory"), tmp_path / "server.log") as (url, _):
        write_overlay(work, tiny_overlay(
            tiny_model, iterations=1, tracking={"enabled": False},
            rewards={"color_match": 1.0, "level": {"weight": 0.5, "remote": {"url": url, "protocol": "flow_factory"}}},
            generate={"prompts_per_iteration": 4, "images_per_prompt": 2}))
        snakemake(work)
        assert planned_jobs(snakemake(work, "-n")) == Counter()

    results = work / "results"
    for table in ("iter_000/scores.parquet", "iter_000/eval.parquet"):
        scored = read_table(results / table).to_pandas()
        if "image" not in scored:  # scores.parquet holds the scores; the images are the rollouts'
            samples = read_table(results / "iter_000/samples.parquet").to_pandas()
            scored = scored.merge(samples[["sample_id", "image"]], on="sample_id")
        levels = [np.asarray(decode_image(cell, table), dtype=np.float64).mean() / 255 for cell in scored.image]
        assert np.allclose(scored.reward_level, levels, atol=1e-12), table
        assert np.allclose(scored.reward, scored.reward_color_match + 0.5 * scored.reward_level), table
    identity = json.loads(read_provenance(results / "iter_000/scores.parquet")["inputs"]["rewards.level.remote"])
    assert identity == {"protocol": "flow_factory", "url": url, "health": {"status": "ok"}}
