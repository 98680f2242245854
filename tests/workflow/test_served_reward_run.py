"""Runs whose reward is served elsewhere: by a server that speaks Flow-Factory's protocol (a stand-in of that
make, tests/unit/rewards/stand_in_servers.py), and the OCR reward's paddleocr backend, which conflicts with
this environment's opencv, served from its own venv by tests/paddleocr_ci.sh, which sets
REWARDLOOP_PADDLE_OCR_URL to the server's address (that test is skipped without it, as in `make test`)."""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest

from rewardloop.artifacts import decode_image, read_provenance, read_table

from remote_servers import free_port, running, stand_in
from workflow_helpers import ROOT, file_digests, planned_jobs, snakemake, tiny_overlay, write_overlay

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
        # a gold reward may be served too: `rewardloop rescore` of the finished run through the same server
        from rewardloop.cli.main import main

        assert main(["rescore", str(work / "results"), "--reward", "level",
                     "--reward-option", f"level.remote={{url: '{url}', protocol: flow_factory}}"]) == 0

    results = work / "results"
    for folder in ("base", "iter_000"):
        rescored = read_table(results / folder / "rescore/level.parquet").to_pandas()
        evaluated = read_table(results / folder / "eval.parquet").to_pandas()
        levels = [np.asarray(decode_image(cell, folder), dtype=np.float64).mean() / 255 for cell in evaluated.image]
        served = rescored[rescored.source == "eval"].set_index("sample_id").loc[evaluated.sample_id, "reward_level"]
        assert np.allclose(served, levels, atol=1e-12), folder
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


def test_a_server_killed_mid_run_fails_the_score_job_naming_it_and_the_rerun_scores_only_what_is_missing(
        tiny_model, tmp_path):
    """Iteration 0 scored by one server; the server is then replaced by one that dies at its first request:
    iteration 1's score job fails naming the server, the request and the cause, and nothing of iteration 0
    changes; with a working server of the same reward again, the rerun plans iteration 1's scoring and what
    follows, not its finished rollouts. (One address throughout: the URL is part of the jobs' params.)"""
    work = tmp_path / "run"
    work.mkdir()
    port = free_port()

    def configure(url: str, iterations: int) -> None:
        write_overlay(work, tiny_overlay(
            tiny_model, iterations=iterations, tracking={"enabled": False},
            rewards={"color_match": 1.0, "mean_level": {"weight": 1.0,
                                                        "remote": {"url": url, "retries": 2, "backoff": 0.05}}},
            generate={"prompts_per_iteration": 4, "images_per_prompt": 2}))

    with running(stand_in("flaky:0"), tmp_path / "first.log", port=port) as (url, _):
        configure(url, 1)
        snakemake(work)
    kept = ("logs", "benchmarks", "report", ".rewardloop.lock")  # (the lock holds the running pid)
    finished = file_digests(work / "results", skip=kept)

    with running(stand_in("vanish"), tmp_path / "vanish.log", port=port) as (url, _):
        configure(url, 2)
        with pytest.raises(AssertionError) as failed:
            snakemake(work)
    message = str(failed.value)
    assert f"POST {url}/score (request 1 of this job" in message and "connection failed" in message, message[-3000:]
    assert "rule score failed" in message
    iteration_1 = work / "results/iter_001"
    assert (iteration_1 / "samples.parquet").is_file() and not (iteration_1 / "scores.parquet").exists()
    assert file_digests(work / "results", skip=(*kept, "iter_001")) == finished

    with running(stand_in("flaky:0"), tmp_path / "again.log", port=port) as (url, _):
        configure(url, 2)
        planned = planned_jobs(snakemake(work, "-n"))
        assert ("score", "it=001") in planned and ("generate", "it=001") not in planned, planned
        # nothing of the finished iteration or the base (its jobs' wildcards name iteration 000 or base/)
        assert not [job for job in planned if job[0] == "eval_base" or "000" in job[1] or "base" in job[1]], planned
        snakemake(work)
    assert (iteration_1 / "scores.parquet").is_file()
