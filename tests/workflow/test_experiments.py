"""Experiments fan-out: variants × seeds in one DAG, sharing the model build and the base eval;
`rewardloop compare` and the comparison figure checked against the runs' Parquet files.

The workflow tests share one finished 2-variant × 2-seed × 1-iteration fan-out (module fixture), which
no test changes (a test that would works on a copy).
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from statistics import mean, stdev

import pandas as pd
import pyarrow.parquet as pq
import pytest

from rewardloop.reports import compare
from rewardloop.config import ConfigError, deep_merge, validate
from rewardloop.experiments import RUN_KEY, first_difference, plan_runs

from workflow_helpers import SNAKEMAKE, copy_run, file_digests, planned_jobs, snakemake, tiny_overlay, write_overlay

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = {"train": str(ROOT / "resources/prompts/train.txt"), "eval": str(ROOT / "resources/prompts/eval.txt")}
T_975 = {1: 12.706204736174705, 2: 4.302652729911275}  # Student's t quantiles (tables), 1 and 2 dof


def given(**sections) -> dict:
    """A config as a user writes it (not validated): the default tiny model, two experiments."""
    base = {"prompts": dict(PROMPTS), "experiments": {"dpo": {}, "sft": {"train": {"loss": "sft"}}}}
    return deep_merge(base, sections)


def plan(config: dict):
    """What rules/experiments.smk does: the config as given, and validated."""
    return plan_runs(config, validate(copy.deepcopy(config)))


# ----------------------------------------------------------------------------------- planning


def test_each_variant_runs_once_per_seed_in_its_own_folder():
    runs = plan(given(seeds=[3, 1]))
    assert [(r.experiment, r.seed, r.folder) for r in runs] == [
        ("dpo", 3, "results/dpo/seed_3"), ("dpo", 1, "results/dpo/seed_1"),
        ("sft", 3, "results/sft/seed_3"), ("sft", 1, "results/sft/seed_1")]
    assert [r.config["seed"] for r in runs] == [3, 1, 3, 1]
    assert [r.config["train"]["loss"] for r in runs] == ["dpo", "dpo", "sft", "sft"]
    # the overlay's objective gets its own defaults, and the other objective's section is gone
    assert "sft" in runs[2].config["train"] and "dpo" not in runs[2].config["train"]
    assert runs[0].config[RUN_KEY] == {"name": "dpo", "seed": 3, "dir": "results/dpo/seed_3", "shared": "results"}
    assert runs[0].module == "dpo_seed3_"


def test_without_seeds_each_variant_runs_with_the_config_seed():
    runs = plan(given(seed=7))
    assert [(r.experiment, r.seed) for r in runs] == [("dpo", 7), ("sft", 7)]


def test_no_experiments_is_a_single_run():
    assert plan({"prompts": dict(PROMPTS)}) == []


@pytest.mark.parametrize("overlay, message", [
    ({"generate": {"resolution": 32}}, "experiments.bad: changes generate.resolution, which the held-out eval reads"),
    ({"eval": {"seeds": [5]}}, "experiments.bad: changes eval.seeds, which the held-out eval reads"),
    ({"rewards": {"color_match": 1.0, "jpeg_compressibility": 1.0}}, "experiments.bad: changes rewards.jpeg_compressibility"),
    ({"tiny": {"unet_steps": 10}}, "experiments.bad: changes tiny.unet_steps, which the shared model build reads"),
    ({"model": {"path": "resources/models/other"}}, "experiments.bad: changes model.path, which the shared model"),
    ({"train": {"bogus": 1}}, "experiments.bad: invalid config:\n  train: Additional properties"),
    ({"seeds": [1]}, "experiments.bad.seeds: an experiment cannot set seeds"),
    ({"eval": {"also_at_guidance": [1.0]}}, "experiments.bad: changes eval.also_at_guidance, which the held-out eval"),
])
def test_a_variant_that_would_not_share_the_base_is_refused(overlay, message):
    with pytest.raises(ConfigError) as err:
        plan(given(experiments={"bad": overlay}))
    assert message in str(err.value)


def test_a_further_eval_guidance_must_differ_from_the_evals_own():
    with pytest.raises(ConfigError, match="eval.also_at_guidance: 5 is the eval's own CFG scale"):
        validate(given(eval={"also_at_guidance": [1.0, 5.0]}))  # generate.guidance_scale: 5.0
    with pytest.raises(ConfigError, match="eval.also_at_guidance: 4.5 is the eval's own"):
        validate(given(eval={"guidance_scale": 4.5, "also_at_guidance": [4.5]}))
    with pytest.raises(ConfigError, match=r"eval.also_at_guidance: \[1.0, 1.0\] has non-unique elements"):
        validate(given(eval={"also_at_guidance": [1.0, 1.0]}))


def test_rollout_guidance_may_differ_when_eval_has_its_own():
    overlay = {"generate": {"guidance_scale": 1.0}}
    with pytest.raises(ConfigError, match="changes generate.guidance_scale"):
        plan(given(experiments={"nocfg": overlay}))
    runs = {run.experiment: run.config for run in plan(given(experiments={"nocfg": overlay}, eval={"guidance_scale": 4.5}))}
    assert runs["nocfg"]["generate"]["guidance_scale"] == 1.0 and runs["dpo"]["generate"]["guidance_scale"] == 5.0
    assert runs["nocfg"]["eval"]["guidance_scale"] == runs["dpo"]["eval"]["guidance_scale"] == 4.5


@pytest.mark.parametrize("name", ["base", "report", "iter_001", "seed_0"])
def test_names_of_results_folders_are_refused(name):
    with pytest.raises(ConfigError, match=f"experiments.{name}: the name is taken"):
        plan(given(experiments={name: {}}))


def test_seeds_without_experiments_are_refused():
    with pytest.raises(ConfigError, match="seeds: only used with experiments"):
        plan({"prompts": dict(PROMPTS), "seeds": [0, 1]})


def test_an_experiment_name_must_be_an_identifier():
    with pytest.raises(ConfigError, match="experiments"):
        validate(given(experiments={"grpo-guard": {}}))


def test_first_difference_names_the_dotted_key():
    assert first_difference({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}) == "a.c"
    assert first_difference({"a": {"b": 1}}, {"a": {"b": 1, "z": 0}}) == "a.z"
    assert first_difference({"a": [1, 2]}, {"a": [1, 2]}) is None


# ------------------------------------------------------------------------------- compare (files)


def test_ci95_is_students_t_interval():
    assert compare.ci95([1.0]) is None
    assert compare.ci95([1.0, 2.0, 3.0]) == pytest.approx(T_975[2] * 1.0 / math.sqrt(3))
    assert compare.ci95([0.5, 1.5]) == pytest.approx(T_975[1] * stdev([0.5, 1.5]) / math.sqrt(2))


def _write_run(folder: Path, evals: list[float], samples: int, train_s: float, other_s: float) -> None:
    for it, value in enumerate(evals):
        metrics = folder / f"iter_{it:03d}" / "metrics"
        metrics.mkdir(parents=True)
        (metrics / "eval.json").write_text(json.dumps({"eval/reward/mean": value}))
        (metrics / "generate.json").write_text(json.dumps({"samples": samples}))
        bench = folder / "benchmarks" / f"iter_{it:03d}"
        bench.mkdir(parents=True)
        header = "s\th:m:s\tmax_rss\n"
        for name, seconds in (("train", train_s), ("generate", other_s), ("advantages", 1.0), ("eval", 100.0),
                              ("tracking", 50.0), ("grids", 25.0), ("health", 7.0), ("guard", 9.0),
                              ("rescore_ocr", 11.0), ("monitors_tracking", 13.0), ("preflight", 17.0),
                              ("preflight_gate", 19.0)):
            (bench / f"{name}.tsv").write_text(f"{header}{seconds}\t0:00:01\t1\n")


def test_compare_rows_from_hand_made_runs(tmp_path):
    (tmp_path / "base/metrics").mkdir(parents=True)
    (tmp_path / "base/metrics/eval.json").write_text(json.dumps({"eval/reward/mean": 1.0}))
    _write_run(tmp_path / "a/seed_0", [1.1, 1.3], samples=10, train_s=2.0, other_s=3.0)
    _write_run(tmp_path / "a/seed_1", [1.2, 1.5, 1.9], samples=10, train_s=4.0, other_s=3.0)  # one ahead
    _write_run(tmp_path / "b/seed_0", [0.9], samples=5, train_s=1.0, other_s=1.0)
    table = compare.rows(tmp_path)
    a = [r for r in table if r["experiment"] == "a"]
    assert [r["iteration"] for r in a] == [-1, 0, 1]  # iteration 2 is seed 1's only: left out
    assert a[0]["eval_mean"] == 1.0 and a[0]["rollouts"] == 0 and a[0]["eval_ci95"] is None
    assert a[2]["eval_mean"] == pytest.approx(1.4)
    assert a[2]["eval_gain"] == pytest.approx(0.4)
    assert a[2]["eval_ci95"] == pytest.approx(T_975[1] * stdev([1.3, 1.5]) / math.sqrt(2))
    assert (a[2]["eval_min"], a[2]["eval_max"]) == (1.3, 1.5)
    assert a[2]["rollouts"] == 20  # cumulative
    assert a[2]["train_s"] == pytest.approx(2 * mean([2.0, 4.0]))
    # wall: train + generate + advantages per iteration; eval, tracking, grids, monitors, preflight are not
    assert a[2]["wall_s"] == pytest.approx(2 * mean([2.0 + 3.0 + 1.0, 4.0 + 3.0 + 1.0]))
    b = [r for r in table if r["experiment"] == "b"]
    assert b[1]["seeds"] == 1 and b[1]["eval_ci95"] is None and b[1]["eval_gain"] == pytest.approx(-0.1)
    csv = compare.render(tmp_path, "csv").splitlines()
    assert csv[0].split(",") == compare.COLUMNS and len(csv) == 1 + len(table)
    assert json.loads(compare.render(tmp_path, "json")) == table
    text = compare.render(tmp_path)
    assert text.splitlines()[0].split() == compare.COLUMNS and "1.4000" in text and "+0.4000" in text


def test_compare_of_the_configs_runs_leaves_out_other_folders(tmp_path):
    """The workflow's comparison reads the config's runs only: an experiment or a seed removed from the
    config keeps its folder, but not its rows."""
    (tmp_path / "base/metrics").mkdir(parents=True)
    (tmp_path / "base/metrics/eval.json").write_text(json.dumps({"eval/reward/mean": 1.0}))
    for folder, value in (("a/seed_0", 1.2), ("a/seed_1", 1.4), ("old/seed_0", 9.0)):
        _write_run(tmp_path / folder, [value], samples=10, train_s=1.0, other_s=1.0)
    assert {r["experiment"] for r in compare.rows(tmp_path)} == {"a", "old"}
    table = compare.rows(tmp_path, only={"a": [0]})
    assert [(r["experiment"], r["iteration"], r["seeds"]) for r in table] == [("a", -1, 1), ("a", 0, 1)]
    assert table[1]["eval_mean"] == pytest.approx(1.2)


def test_compare_has_columns_for_each_further_eval_guidance(tmp_path):
    (tmp_path / "base/metrics").mkdir(parents=True)
    (tmp_path / "base/metrics/eval.json").write_text(json.dumps({"eval/reward/mean": 1.0}))
    (tmp_path / "base/metrics/eval_cfg1.json").write_text(json.dumps({"eval_cfg1/reward/mean": 0.5}))
    for seed, at_cfg1 in ((0, [0.6, 0.9]), (1, [0.8])):  # seed 1's iteration-1 eval at CFG 1 is not done yet
        folder = tmp_path / f"a/seed_{seed}"
        _write_run(folder, [1.1, 1.2], samples=10, train_s=1.0, other_s=1.0)
        for it, value in enumerate(at_cfg1):
            (folder / f"iter_{it:03d}/metrics/eval_cfg1.json").write_text(json.dumps({"eval_cfg1/reward/mean": value}))
    table = compare.rows(tmp_path)
    assert compare.table_columns(table) == compare.COLUMNS[:8] + ["eval_cfg1_mean", "eval_cfg1_ci95", "eval_cfg1_gain"] \
        + compare.COLUMNS[8:]
    base, first, second = table
    assert (base["eval_cfg1_mean"], base["eval_cfg1_gain"]) == (0.5, 0.0)
    assert first["eval_cfg1_mean"] == pytest.approx(0.7) and first["eval_cfg1_gain"] == pytest.approx(0.2)
    assert first["eval_cfg1_ci95"] == pytest.approx(T_975[1] * stdev([0.6, 0.8]) / math.sqrt(2))
    assert second["eval_mean"] == pytest.approx(1.2) and second["eval_cfg1_mean"] is None  # never a one-seed mean
    assert compare.render(tmp_path, "csv").splitlines()[0].split(",") == compare.table_columns(table)
    out = tmp_path / "figure.png"
    compare.plot(table, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_on_a_folder_without_runs_says_what_it_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="no <experiment>/seed_<s>/ folders"):
        compare.rows(tmp_path)


# ------------------------------------------------------------------------- the real fan-out



@pytest.fixture(scope="module")
def fanout(tmp_path_factory, tiny_model):
    """A finished 2-variant (dpo, sft) × 2-seed × 1-iteration fan-out on the tiny model, with tracking."""
    work = tmp_path_factory.mktemp("fanout")
    overlay = tiny_overlay(tiny_model, iterations=1, seeds=[0, 1], eval={"also_at_guidance": [1.0]},
                           experiments={"dpo": {}, "sft": {"train": {"loss": "sft"}}})
    write_overlay(work, overlay)
    result = snakemake(work)
    return work, result


RUNS = [("dpo", 0), ("dpo", 1), ("sft", 0), ("sft", 1)]


def jobs_run(result: subprocess.CompletedProcess) -> list[str]:
    return [line.split()[-1].rstrip(":") for line in result.stderr.splitlines()
            if line.startswith(("rule ", "localrule "))]


@pytest.mark.workflow
def test_the_base_eval_runs_once_and_every_run_gets_a_copy(fanout):
    work, result = fanout
    ran = jobs_run(result)
    assert ran.count("eval_base") == 1 and ran.count("eval_base_at_guidance") == 1
    assert not any(name.endswith("build_tiny_model") for name in ran)  # the fixture's model is a user model
    assert sorted(name for name in ran if name.endswith("share_base")) == sorted(
        f"{e}_seed{s}_share_base" for e, s in RUNS)
    shared = (work / "results/base/eval.parquet").read_bytes()
    for experiment, seed in RUNS:
        run = work / "results" / experiment / f"seed_{seed}"
        assert (run / "base/eval.parquet").read_bytes() == shared
        assert (run / "base/eval_cfg1.parquet").read_bytes() == (work / "results/base/eval_cfg1.parquet").read_bytes()
        assert not (run / "benchmarks/base/eval.tsv").exists()  # no eval of its own


@pytest.mark.workflow
def test_every_run_has_the_single_run_layout(fanout):
    work, _ = fanout
    results = work / "results"
    assert not (results / "iter_000").exists()
    for experiment, seed in RUNS:
        it = results / experiment / f"seed_{seed}" / "iter_000"
        signal = "pairs.parquet"
        for name in ("samples.parquet", "scores.parquet", signal, "latents.safetensors", "eval.parquet",
                     "train/pytorch_lora_weights.safetensors", "checkpoint/pytorch_lora_weights.safetensors",
                     "grid.png", "eval_grid.png", "tracking.json"):
            assert (it / name).is_file(), it / name
        assert (it.parent / "report/curves.png").is_file()


@pytest.mark.workflow
def test_seeds_make_different_rollouts_and_variants_different_models(fanout):
    work, _ = fanout
    results = work / "results"
    samples = {run: pq.read_table(results / run[0] / f"seed_{run[1]}/iter_000/samples.parquet").to_pandas()
               for run in RUNS}
    assert not samples[("dpo", 0)]["seed"].equals(samples[("dpo", 1)]["seed"])
    assert samples[("dpo", 0)]["seed"].equals(samples[("sft", 0)]["seed"])  # same seed, same first rollouts
    lora = {run: (results / run[0] / f"seed_{run[1]}/iter_000/checkpoint/pytorch_lora_weights.safetensors").read_bytes()
            for run in RUNS}
    assert len(set(lora.values())) == 4


@pytest.mark.workflow
def test_compare_matches_the_parquet_files(fanout):
    work, _ = fanout
    results = work / "results"
    table = {(r["experiment"], r["iteration"]): r for r in compare.rows(results)}
    base = pq.read_table(results / "base/eval.parquet").to_pandas()["reward"].mean()
    for experiment in ("dpo", "sft"):
        assert table[(experiment, -1)]["eval_mean"] == pytest.approx(base)
        per_seed = [pq.read_table(results / experiment / f"seed_{s}/iter_000/eval.parquet").to_pandas()["reward"].mean()
                    for s in (0, 1)]
        row = table[(experiment, 0)]
        assert row["seeds"] == 2
        assert row["eval_mean"] == pytest.approx(mean(per_seed))
        assert row["eval_ci95"] == pytest.approx(T_975[1] * stdev(per_seed) / math.sqrt(2))
        assert row["eval_gain"] == pytest.approx(mean(per_seed) - base)
        at_cfg1 = [pq.read_table(results / experiment / f"seed_{s}/iter_000/eval_cfg1.parquet").to_pandas()["reward"].mean()
                   for s in (0, 1)]
        base_cfg1 = pq.read_table(results / "base/eval_cfg1.parquet").to_pandas()["reward"].mean()
        assert row["eval_cfg1_mean"] == pytest.approx(mean(at_cfg1))
        assert row["eval_cfg1_gain"] == pytest.approx(mean(at_cfg1) - base_cfg1)
        assert at_cfg1 != pytest.approx(per_seed)  # another guidance, other images
        rollouts = [len(pq.read_table(results / experiment / f"seed_{s}/iter_000/samples.parquet")) for s in (0, 1)]
        assert row["rollouts"] == mean(rollouts) == 18
        assert row["train_s"] > 0 and row["wall_s"] > row["train_s"]
    written = pd.read_csv(results / "report/compare.csv")
    assert list(written.columns) == compare.table_columns(compare.rows(results))
    assert written["eval_mean"].tolist() == pytest.approx([r["eval_mean"] for r in compare.rows(results)])
    cli = subprocess.run([str(Path(sys.executable).with_name("rewardloop")), "compare", str(results), "--format", "json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(cli.stdout) == compare.rows(results)


@pytest.mark.workflow
def test_the_report_has_the_comparison_figure(fanout, tmp_path):
    work, _ = fanout
    figure = work / "results/report/experiments.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    copy = copy_run(work, tmp_path / "copy")
    snakemake(copy, "--report", str(copy / "report.zip"))
    import zipfile

    names = zipfile.ZipFile(copy / "report.zip").namelist()
    assert any(name.endswith("experiments.png") for name in names)
    assert sum(name.endswith("curves.png") for name in names) == 4


@pytest.mark.workflow
def test_one_mlflow_run_per_experiment_and_seed(fanout):
    from mlflow.tracking import MlflowClient

    work, _ = fanout
    client = MlflowClient(f"sqlite:///{work}/results/mlflow.db")
    experiment = client.get_experiment_by_name("rewardloop")
    parents = client.search_runs([experiment.experiment_id], filter_string="tags.`rewardloop.role` = 'parent'")
    tagged = sorted((r.data.tags["rewardloop.experiment"], int(r.data.tags["rewardloop.seed"])) for r in parents)
    assert tagged == RUNS
    for run in parents:
        assert run.data.params["seed"] == run.data.tags["rewardloop.seed"]
        assert run.data.params["train.loss"] == run.data.tags["rewardloop.experiment"]
        assert run.info.run_name.endswith(f"{run.data.tags['rewardloop.experiment']} seed {run.data.tags['rewardloop.seed']}")
    for experiment_name, seed in RUNS:
        marker = json.loads((work / "results" / experiment_name / f"seed_{seed}/iter_000/tracking.json").read_text())
        assert marker["status"] == "ok", marker


@pytest.mark.workflow
def test_a_rerun_plans_nothing_and_a_new_seed_only_its_own_runs(fanout, tmp_path):
    work, _ = fanout
    assert planned_jobs(snakemake(work, "-n")) == {}
    copy = copy_run(work, tmp_path / "copy")
    before = file_digests(copy / "results", skip=("mlflow.db",))
    more = write_overlay(tmp_path, {"seeds": [0, 1, 2]})
    planned = planned_jobs(snakemake(copy, "-n", overlays=(more,)))
    rules = {rule for rule, _ in planned}
    assert "eval_base" not in rules and not any(r.startswith(("dpo_seed0_", "dpo_seed1_", "sft_seed0_", "sft_seed1_"))
                                                  for r in rules)
    assert {"dpo_seed2_train", "sft_seed2_train", "compare_experiments"} <= rules
    assert file_digests(copy / "results", skip=("mlflow.db",)) == before


@pytest.mark.workflow
def test_a_further_eval_guidance_plans_only_its_evals(fanout, tmp_path):
    """Adding a scale to eval.also_at_guidance runs its evals of the base and of every iteration (and
    what reads their metrics); no rollout, training or other eval."""
    work, _ = fanout
    more = write_overlay(tmp_path, {"eval": {"also_at_guidance": [1.0, 2.0]}})
    planned = planned_jobs(snakemake(work, "-n", overlays=(more,)))
    evals = sorted((rule, wildcards) for rule, wildcards in planned if "eval" in rule and "tracking" not in rule)
    assert evals == sorted([("eval_base_at_guidance", "guidance_eval=eval_cfg2")] + [
        (f"{e}_seed{s}_eval_at_guidance", "it=000, guidance_eval=eval_cfg2") for e, s in RUNS])
    rules = {rule.split("_", 2)[-1] if rule[:3] in ("dpo", "sft") else rule for rule, _ in planned}
    assert rules == {"eval_base_at_guidance", "eval_at_guidance", "share_base_at_guidance", "track_base",
                     "track_iteration", "compare_experiments", "report_config", "all"}, planned
    # the tracking jobs log the new metrics (the base's and each iteration's), but no guard or loop job runs
    tracked = sorted(job for job in planned if job[0].endswith(("track_base", "track_iteration")))
    assert tracked == sorted([(f"{e}_seed{s}_track_base", "") for e, s in RUNS]
                             + [(f"{e}_seed{s}_track_iteration", "it=000") for e, s in RUNS]), planned


@pytest.mark.workflow
def test_a_bad_variant_stops_the_workflow_before_any_job(tmp_path, tiny_model):
    write_overlay(tmp_path, tiny_overlay(tiny_model, experiments={"lowres": {"generate": {"resolution": 48}}}))
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile",
           str(tmp_path / "test.yaml"), "--cores", "1", "-n"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode != 0
    assert "experiments.lowres: changes generate.resolution" in result.stderr + result.stdout
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("rollout_cfg, eval_cfg, same", [(5.0, 1.0, True), (5.0, None, False)])
def test_eval_guidance_scale_is_the_eval_images_cfg(tmp_path, tiny_model, rollout_cfg, eval_cfg, same):
    """eval.guidance_scale replaces generate.guidance_scale in eval (and only there): eval images at
    eval.guidance_scale 1.0 are those of a run whose rollouts sample at 1.0."""
    from rewardloop.config import eval_config
    from rewardloop.stages import evaluate

    prompts = tmp_path / "eval.txt"
    prompts.write_text("a red circle on a blue background\na green square on a yellow background\n")

    def eval_images(generate_cfg, eval_guidance, name):
        config = validate(tiny_overlay(tiny_model, prompts={"eval": str(prompts)}, generate={"guidance_scale": generate_cfg, "resolution": 32},
                                       eval={"guidance_scale": eval_guidance}))
        evaluate.run(eval_config(config), None, None, tmp_path / f"{name}.parquet", tmp_path / f"{name}.json",
                     progress=False)
        return pq.read_table(tmp_path / f"{name}.parquet").to_pandas().sort_values("sample_id")["image"].tolist()

    reference = eval_images(1.0, None, "reference")
    assert (eval_images(rollout_cfg, eval_cfg, "other") == reference) is same


@pytest.mark.workflow
def test_per_rule_resources_of_a_profile_reach_every_runs_rules(fanout, tmp_path):
    """profiles/slurm sets resources by rule name (train, generate_shard, ...): a fan-out's prefixed
    rules get them too, and an entry for the prefixed name itself wins."""
    work, _ = fanout
    result = snakemake(work, "-n", "--forcerun", "dpo_seed0_train", "sft_seed1_train",
                       "--set-resources", "train:mem_mb=12345", "sft_seed1_train:mem_mb=2345",
                       "--set-threads", "train=2")
    blocks = result.stdout.split("\n\n")
    dpo = next(b for b in blocks if "rule dpo_seed0_train:" in b)
    sft = next(b for b in blocks if "rule sft_seed1_train:" in b)
    assert "mem_mb=12345" in dpo and "threads: 2" in dpo
    assert "mem_mb=2345" in sft and "threads: 2" in sft


FIRST_CONTACT = """
import sys, time
from rewardloop import tracking
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all at once
client = tracking.client(sys.argv[1], first_contact=True)
print(len(client.search_experiments()))
"""


def test_parallel_tracking_jobs_may_create_one_new_sqlite_store(tmp_path):
    """A fan-out starts one tracking job per run at once: the first opening of a new SQLite store (its
    tables and migrations) must not race ("table ... already exists" broke all but one before the lock)."""
    import os
    import time

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    start = str(time.time() + 8)
    procs = [subprocess.Popen([sys.executable, "-c", FIRST_CONTACT, uri, start], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
             for _ in range(4)]
    outputs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in outputs]
    assert [out.strip().splitlines()[-1] for out, _ in outputs] == ["1"] * 4  # the Default experiment


def test_the_shipped_comparison_plans_nine_variants_times_three_seeds(monkeypatch):
    """configs/tiny_sd3_compare.yaml (issue 16's protocol, issue 45's objectives): every variant validates,
    shares the base, and runs its own recipe's objective with that recipe's options; grpo_group16 is grpo
    with groups of 16, mixgrpo its recipe's groups of 12, on the same rollout budget."""
    import yaml

    from rewardloop.smoke.overlay import recipe_config

    monkeypatch.chdir(ROOT)
    config = recipe_config(ROOT / "configs/tiny_sd3_compare.yaml")
    runs = plan(config)
    assert [(r.experiment, r.seed) for r in runs] == [
        (name, seed) for name in ("grpo", "grpo_guard", "grpo_fast", "nft", "awm", "dpo", "grpo_group16", "dgpo",
                                  "mixgrpo") for seed in (0, 1, 2)]
    assert {r.config["iterations"] for r in runs} == {5}
    budget = {r.experiment: (r.config["generate"]["prompts_per_iteration"], r.config["generate"]["images_per_prompt"])
              for r in runs}
    assert budget == {**{name: (24, 8) for name in budget}, "grpo_group16": (12, 16), "mixgrpo": (16, 12)}
    by_name = {r.experiment: r.config for r in runs}
    for name, recipe in (("nft", "tiny_sd3_nft"), ("awm", "tiny_sd3_awm"), ("dpo", "tiny_sd3_dpo"),
                         ("grpo", "tiny_sd3_grpo"), ("dgpo", "tiny_sd3_dgpo"), ("mixgrpo", "tiny_sd3_mixgrpo")):
        own = yaml.safe_load((ROOT / f"configs/{recipe}.yaml").read_text())
        loss = own["train"]["loss"]
        assert by_name[name]["train"]["loss"] == loss
        assert {k: by_name[name]["train"][loss][k] for k in own["train"][loss]} == own["train"][loss], name
        assert by_name[name]["generate"]["guidance_scale"] == own["generate"]["guidance_scale"], name
        assert by_name[name]["advantages"] == {**by_name[name]["advantages"], **own.get("advantages", {})}, name
        for key in ("batch_size", "gradient_accumulation_steps", "max_grad_norm"):
            assert by_name[name]["train"][key] == own["train"].get(key, by_name[name]["train"][key]), (name, key)
    mix = yaml.safe_load((ROOT / "configs/tiny_sd3_mixgrpo.yaml").read_text())["generate"]
    assert {k: by_name["mixgrpo"]["generate"]["sde"][k] for k in mix["sde"]} == mix["sde"]
    assert by_name["mixgrpo"]["generate"]["images_per_prompt"] == mix["images_per_prompt"]
    fast = yaml.safe_load((ROOT / "configs/tiny_sd3_grpo_fast.yaml").read_text())["generate"]["sde"]
    assert {k: by_name["grpo_fast"]["generate"]["sde"][k] for k in fast} == fast
    assert by_name["grpo_guard"]["train"]["grpo"]["guard"] is True and by_name["grpo"]["train"]["grpo"]["guard"] is False


def flat(section: dict, prefix: str = "") -> dict:
    """``{"a.b": value}`` of a nested mapping."""
    out = {}
    for key, value in section.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_the_tuning_screen_varies_one_setting_around_the_comparisons_values(monkeypatch):
    """configs/tiny_sd3_tune.yaml: each baseline variant is the comparison's variant of that name (on
    3 iterations of seed 0), and each other variant changes only what its name says of one baseline."""
    from rewardloop.smoke.overlay import recipe_config

    monkeypatch.chdir(ROOT)
    tune = {r.experiment: r.config for r in plan(recipe_config(ROOT / "configs/tiny_sd3_tune.yaml"))}
    shipped = {r.experiment: r.config for r in plan(recipe_config(ROOT / "configs/tiny_sd3_compare.yaml"))
               if r.seed == 0}
    assert {c["iterations"] for c in tune.values()} == {3} and {c["seed"] for c in tune.values()} == {0}
    def runs(config: dict) -> dict:  # what a run's jobs read, flattened
        return flat({k: config[k] for k in ("model", "generate", "rewards", "advantages", "pairs", "train", "eval")})

    for name in ("grpo", "grpo_fast", "nft", "awm", "dpo", "grpo_group16"):  # (the comparison took grpo_group16 in)
        assert runs(tune[name]) == runs(shipped[name]), name
    changed = {
        "grpo_lr_high": ("grpo", {"train.learning_rate": 1e-3}),
        "grpo_noise1": ("grpo", {"generate.sde.noise_level": 1.0}),
        "grpo_group16": ("grpo", {"generate.prompts_per_iteration": 12, "generate.images_per_prompt": 16}),
        "grpo_fast_window4": ("grpo_fast", {"generate.sde.num_sde_steps": 4}),
        "grpo_fast_lr_high": ("grpo_fast", {"train.learning_rate": 1e-3}),
        "nft_lr_high": ("nft", {"train.learning_rate": 1e-3}),
        "awm_lr_high": ("awm", {"train.learning_rate": 1e-3}),
        "dpo_lr_low": ("dpo", {"train.learning_rate": 1e-4}),
    }
    assert set(tune) == set(changed) | {"grpo", "grpo_fast", "nft", "awm", "dpo"}
    for name, (baseline, difference) in changed.items():
        variant, base = runs(tune[name]), runs(tune[baseline])
        assert {k: v for k, v in variant.items() if base.get(k) != v} == difference, name
