"""The real snakemake workflow on the tiny model: artifacts, no-op rerun, extension, resume, and what a
config change reruns.

Every test is independent of the others (any order, any subset): the module's finished run stays as it
is (checked after each test), and a test that changes a run works on its own copy of it.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from rewardloop.artifacts import IMAGE_TYPE, read_provenance

from model_helpers import outputs_before_and_after_lora
from workflow_helpers import (SNAKEMAKE, copy_run, file_digests, planned_jobs, snakemake, tiny_overlay,
                              write_overlay)

pytestmark = pytest.mark.workflow


def jobs_run(result: subprocess.CompletedProcess) -> list[str]:
    """Rule names of the jobs snakemake ran (from its 'rule X:' lines)."""
    return [line.split()[-1].rstrip(":") for line in result.stderr.splitlines()
            if line.startswith(("rule ", "localrule "))]


@pytest.fixture(scope="module")
def workdir(finished_run):
    """The session's finished 2-iteration run (conftest's ``finished_run``); tests only read it (see
    ``module_run_stays_as_it_was``). Rollouts in 3 batches of 6 and scoring in 2 of 16, so that 2 shards
    of either are a valid config."""
    return finished_run


def run_files(workdir: Path) -> dict:
    """sha256 and mtime of the run's config and of every file under results/ (not .snakemake/, where
    even a dry run writes a cache)."""
    return file_digests(workdir, skip=(".snakemake",))


@pytest.fixture(autouse=True)
def module_run_stays_as_it_was(request):
    """After each test that uses the module's run: not one of its files changed or appeared."""
    if "workdir" not in request.fixturenames:
        yield
        return
    workdir = request.getfixturevalue("workdir")
    before = run_files(workdir)
    yield
    after = run_files(workdir)
    assert after == before, f"{request.node.name} changed the module's run: " + str(
        sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))


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


def test_rerun_does_nothing(workdir, tmp_path):
    run = copy_run(workdir, tmp_path / "run")
    before = run_files(run)
    result = snakemake(run)
    assert jobs_run(result) == [], result.stderr[-2000:]
    assert run_files(run) == before  # not a file rewritten, nor touched


def changed_files(before: dict, after: dict) -> set[str]:
    """Files that changed, appeared or went; not the run lock (a run writes its pid there)."""
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} - {".rewardloop.lock"}


def test_extend_iterations_runs_only_new_jobs(workdir, tmp_path):
    run = copy_run(workdir, tmp_path / "run")
    before = file_digests(run / "results")
    result = snakemake(run, "--config", "iterations=3")
    ran = jobs_run(result)
    assert sorted(set(ran)) == ["all", "eval", "export", "generate", "guard", "pairs",
                                "plot_curves", "plot_health", "report_config", "score", "train"]
    assert ran.count("train") == 1
    assert (run / "results/iter_002/eval.parquet").is_file()
    # Every file of the base model's and of iterations 0-1's jobs is as it was (sha256 and mtime); only
    # the report (curves, health figure and config of every iteration) is redone, with its log and benchmark.
    changed = changed_files(before, file_digests(run / "results"))
    assert {k for k in changed if not k.startswith(("iter_002/", "logs/iter_002/", "benchmarks/iter_002/"))} == {
        *(f"{folder}/{job}{suffix}" for job in ("plot_curves", "plot_health", "config")
          for folder, suffix in (("logs/report", ".log"), ("benchmarks/report", ".tsv"))),
        "report/curves.png", "report/health.png", "report/config.yaml", "logs/warm_worker.log"}


def test_deleted_train_output_is_redone_and_nothing_else(workdir, tmp_path):
    run = copy_run(workdir, tmp_path / "run")
    lora = run / "results/iter_001/train/pytorch_lora_weights.safetensors"
    lora.unlink()
    before = file_digests(run / "results")
    result = snakemake(run)
    assert sorted(jobs_run(result)) == ["all", "eval", "export", "guard", "plot_curves", "plot_health", "train"]
    assert lora.is_file()
    changed = changed_files(before, file_digests(run / "results"))
    # Iteration 1's rollouts, scores and pairs, and everything of iteration 0 and the base model, are
    # untouched (sha256 and mtime).
    untouched = [k for k in before if k.startswith(("iter_000/", "base/")) or k in (
        "iter_001/samples.parquet", "iter_001/latents.safetensors", "iter_001/scores.parquet",
        "iter_001/pairs.parquet")]
    assert len(untouched) > 10 and not changed & set(untouched), sorted(changed)
    assert "iter_001/train/pytorch_lora_weights.safetensors" in changed


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


# What a change reruns (README, docs/configuration.md): a dry run (-n) on the module's finished run with
# a config overlay, and the exact jobs Snakemake would run.

def dry_run(workdir: Path, tmp_path: Path, overlay: dict) -> Counter:
    """{(rule, wildcards): count} of the jobs ``snakemake -n`` plans with ``overlay`` over test.yaml.
    A dry run that fails (a config refused, say) raises RuntimeError, never the AssertionError that
    an xfail below expects."""
    path = tmp_path / "change.yaml"
    path.write_text(yaml.safe_dump(overlay))
    try:
        result = snakemake(workdir, "-n", overlays=(path,))
    except AssertionError as failed:
        raise RuntimeError(str(failed)) from None
    return planned_jobs(result)


def jobs(rules: tuple[str, ...], *its: int) -> Counter:
    return Counter({(rule, f"it={it:03d}"): 1 for rule in rules for it in its})


REPORT = Counter({("plot_curves", ""): 1, ("plot_health", ""): 1, ("report_config", ""): 1, ("all", ""): 1})
ITERATION = ("generate", "score", "pairs", "train", "export", "eval", "guard")  # eval writes health and grids
PREFLIGHT = Counter({("preflight", ""): 1, ("preflight_gate", ""): 1})  # iteration 0 only, before it trains


def test_a_dry_run_of_the_finished_run_plans_nothing(workdir, tmp_path):
    assert dry_run(workdir, tmp_path, {}) == Counter()


def test_changing_dpo_beta_reruns_training_and_what_follows_but_not_the_first_rollouts(workdir, tmp_path):
    planned = dry_run(workdir, tmp_path, {"train": {"dpo": {"beta": 1000}}})
    # Iteration 0: train and what depends on it; iteration 1: everything (it samples from model(0)).
    expected = jobs(("train", "export", "eval", "guard"), 0) + jobs(ITERATION, 1) + REPORT + PREFLIGHT
    assert planned == expected
    assert ("generate", "it=000") not in planned and ("eval_base", "") not in planned


def test_raising_iterations_touches_no_finished_job_of_an_iteration(workdir, tmp_path):
    """Only the new iteration's jobs, and the report's curves and config, which cover every iteration."""
    planned = dry_run(workdir, tmp_path, {"iterations": 3})
    assert planned == jobs(ITERATION, 2) + REPORT


@pytest.mark.parametrize("overlay", [{"tracking": {"enabled": True}},
                                     {"generate": {"shards": 2}, "score": {"shards": 2}, "gold_rewards": {"jpeg_compressibility": 1.0}}],
                         ids=["one-shard", "sharded"])
def test_the_workflow_passes_snakemakes_lint(workdir, tmp_path, overlay):
    """Every rule the config defines (the sharded rules exist only with shards > 1) has what snakemake's
    linter asks for: logs, no absolute or hard-coded path prefixes in params, ..."""
    path = tmp_path / "lint.yaml"
    path.write_text(yaml.safe_dump(overlay))
    result = snakemake(workdir, "--lint", overlays=(path,))
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr, result.stdout


SHARDS_RERUN = (
    "false today: with shards > 1, rules/generate.smk and rules/score.smk make samples.parquet/scores.parquet "
    "with another rule (a local gather job, scripts/gather_*.py, over generate_shard/score_shard jobs) than the "
    "finished unsharded job: Snakemake sees its code, params and set of inputs changed and the shard files "
    "missing, so it plans the shard jobs, the gather and every job downstream (with generate.shards, every "
    "job of both iterations); and report_config's params are the whole config, shard counts included")


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=SHARDS_RERUN)
@pytest.mark.parametrize("change", [{"generate": {"shards": 2}}, {"score": {"shards": 2}},
                                    {"generate": {"shards": 3}, "score": {"shards": 2}}],
                         ids=["generate", "score", "both"])
def test_changing_shard_counts_reruns_nothing(workdir, tmp_path, change):
    planned = dry_run(workdir, tmp_path, change)
    assert planned == Counter(), sorted(planned.items())
