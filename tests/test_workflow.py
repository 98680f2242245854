"""The real snakemake workflow on the tiny model: artifacts, no-op rerun, extension, resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from rewardloop.artifacts import IMAGE_TYPE, read_provenance

from model_helpers import outputs_before_and_after_lora
from workflow_helpers import SNAKEMAKE, snakemake, tiny_overlay, write_overlay

pytestmark = pytest.mark.workflow


def jobs_run(result: subprocess.CompletedProcess) -> list[str]:
    """Rule names of the jobs snakemake ran (from its 'rule X:' lines)."""
    return [line.split()[-1].rstrip(":") for line in result.stderr.splitlines()
            if line.startswith(("rule ", "localrule "))]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_model, repo_root):
    work = tmp_path_factory.mktemp("run")
    write_overlay(work, tiny_overlay(tiny_model, tracking={"enabled": False}))  # MLflow: test_tracking.py
    snakemake(work)
    return work


def table(workdir: Path, rel: str) -> pd.DataFrame:
    return pq.read_table(workdir / "results" / rel).to_pandas()


def test_artifacts_join_across_stages(workdir):
    for it in ("iter_000", "iter_001"):
        samples, scores, pairs = (table(workdir, f"{it}/{n}.parquet") for n in ("samples", "scores", "pairs"))
        assert len(samples) == 6 * 3 and samples.sample_id.is_unique
        assert pq.read_schema(workdir / "results" / it / "samples.parquet").field("image").type == IMAGE_TYPE
        assert set(scores.sample_id) == set(samples.sample_id)
        assert {"reward", "reward_color_match", "reward_details"} <= set(scores.columns)
        assert set(pairs.chosen) | set(pairs.rejected) <= set(samples.sample_id)
        assert (pairs.margin > 0).all() and len(pairs) <= 6
        assert read_provenance(workdir / "results" / it / "samples.parquet")["iteration"] == int(it[-3:])
        assert (workdir / "results" / it / "checkpoint" / "pytorch_lora_weights.safetensors").is_file()
    base_eval, final_eval = table(workdir, "base/eval.parquet"), table(workdir, "iter_001/eval.parquet")
    assert len(base_eval) == len(final_eval) > 0
    assert list(base_eval.seed) == list(final_eval.seed)  # same held-out prompts and seeds
    assert not list((workdir / "results").rglob(".tmp-*"))


def test_rollouts_differ_between_iterations(workdir):
    first, second = table(workdir, "iter_000/samples.parquet"), table(workdir, "iter_001/samples.parquet")
    assert set(first.seed).isdisjoint(second.seed)


def test_exported_lora_loads_into_plain_diffusers(workdir, tiny_model):
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(tiny_model, safety_checker=None, requires_safety_checker=False)
    before, after = outputs_before_and_after_lora(pipe, workdir / "results/iter_001/checkpoint",
                                                  num_inference_steps=3, output_type="np")
    assert after.shape == before.shape and abs(after - before).max() > 0


def test_rerun_does_nothing(workdir, repo_root):
    result = snakemake(workdir)
    assert jobs_run(result) == [], result.stderr[-2000:]


def test_extend_iterations_runs_only_new_jobs(workdir, repo_root):
    old = workdir / "results/iter_001/checkpoint/pytorch_lora_weights.safetensors"
    mtime = old.stat().st_mtime_ns
    result = snakemake(workdir, "--config", "iterations=3")
    ran = jobs_run(result)
    assert sorted(set(ran)) == ["all", "eval", "export", "generate", "grids", "pairs", "plot_curves",
                                "report_config", "score", "train"]
    assert ran.count("train") == 1 and old.stat().st_mtime_ns == mtime
    assert (workdir / "results/iter_002/eval.parquet").is_file()


def test_deleted_train_output_is_redone_and_nothing_else(workdir, repo_root):
    lora = workdir / "results/iter_002/train/pytorch_lora_weights.safetensors"
    samples = workdir / "results/iter_002/samples.parquet"
    samples_mtime = samples.stat().st_mtime_ns
    lora.unlink()
    result = snakemake(workdir, "--config", "iterations=3")
    assert sorted(jobs_run(result)) == ["all", "eval", "export", "grids", "plot_curves", "train"]
    assert samples.stat().st_mtime_ns == samples_mtime and lora.is_file()


def test_inspect_summarises_artifacts(workdir):
    rewardloop = str(Path(sys.executable).with_name("rewardloop"))
    out = subprocess.run([rewardloop, "inspect", "results/iter_000/pairs.parquet", "results/iter_000/scores.parquet",
                          "results/iter_000/latents.safetensors"], cwd=workdir, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "pairs.parquet: Parquet" in out.stdout and "margin: mean" in out.stdout
    assert "reward: mean" in out.stdout and '"iteration": 0' in out.stdout
    assert "latents (18)" in out.stdout and "prompt_embeds (6)" in out.stdout
    missing = subprocess.run([rewardloop, "inspect", "results/nope.parquet"], cwd=workdir, capture_output=True,
                             text=True)
    assert missing.returncode == 1 and "nope.parquet: file not found" in missing.stderr


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"iterations": 0}, "iterations: 0 is less than the minimum of 1"),
        ({"generate": {"resolution": 36}}, "generate.resolution: 36 is not divisible by 8"),
        ({"rewards": {"ocr": 1.0}}, "has none"),
        ({"train": {"lr": 0.1}}, "Additional properties are not allowed ('lr'"),
    ],
)
def test_bad_config_stops_before_any_job(tmp_path, tiny_model, repo_root, bad, message):
    write_overlay(tmp_path, tiny_overlay(tiny_model))
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    cmd = [SNAKEMAKE, "-s", str(repo_root / "Snakefile"), "--directory", str(tmp_path), "--configfile",
           str(tmp_path / "test.yaml"), str(tmp_path / "bad.yaml"), "--cores", "1"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode != 0
    assert message in result.stderr + result.stdout
    assert not (tmp_path / "results").exists()
