"""A finished run changes exactly when, and only where, its inputs change (real snakemake, dry runs).

One finished 1-iteration run per module on a private copy of the tiny model, with a PickScore
stand-in beside color_match, so that a test may rewrite the model's or the reward's weights (and puts
them back). What a dry run then plans is compared job by job.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from rewardloop.artifacts import read_provenance
from rewardloop.smoke.standins import build_standin

from workflow_helpers import ROOT, copy_run, planned_jobs, snakemake, tiny_overlay, write_overlay

pytestmark = pytest.mark.workflow
UNET = "unet/diffusion_pytorch_model.safetensors"
REPORT = Counter({("plot_curves", ""): 1, ("plot_health", ""): 1, ("all", ""): 1})  # report_config reads the config alone
PREFLIGHT = Counter({("preflight", ""): 1, ("preflight_gate", ""): 1})  # read iteration 0 rollouts, before train(0)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_model) -> Path:
    root = tmp_path_factory.mktemp("integrity")
    model = root / "model"
    shutil.copytree(tiny_model, model)
    pickscore = build_standin("pickscore", root / "pickscore")
    work = root / "run"
    work.mkdir()
    write_overlay(work, tiny_overlay(
        model, iterations=1, tracking={"enabled": False}, rewards={"pickscore": {"weight": 0.01, **pickscore}},
        generate={"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 2},
        train={"steps": 2, "batch_size": 2}, eval={"steps": 2}))
    snakemake(work)
    return work


def dry_run(work: Path, overlay: dict | None = None) -> Counter:
    path = work / "change.yaml"
    path.write_text(yaml.safe_dump(overlay or {}))
    return planned_jobs(snakemake(work, "-n", overlays=(path,)))


def config(work: Path) -> dict:
    return yaml.safe_load((work / "test.yaml").read_text())


def iteration(*rules: str) -> Counter:
    return Counter({(rule, "it=000"): 1 for rule in rules})


def watched() -> Counter:
    """The monitors of an eval redone (its job rewrites its folder's image health): iteration 0's guard."""
    return iteration("guard")


@pytest.fixture
def rewritten(finished):
    """Rewrite a file's bytes after its header (same size: as a retrained checkpoint of the same
    architecture would be) and put them back afterwards."""
    saved = []

    def rewrite(path: Path) -> None:
        data = path.read_bytes()
        saved.append((path, data))
        header = 8 + int.from_bytes(data[:8], "little")
        path.write_bytes(data[:header] + bytes(b ^ 0x5A for b in data[header:]))

    yield rewrite
    for path, data in saved:
        path.write_bytes(data)


def test_the_finished_run_plans_nothing_and_records_what_it_read(finished):
    assert dry_run(finished) == Counter()
    inputs = read_provenance(finished / "results/iter_000/samples.parquet")["inputs"]
    assert set(inputs) == {"model.path"}
    assert set(read_provenance(finished / "results/iter_000/scores.parquet")["inputs"]) == {
        "rewards.pickscore.model_path", "rewards.pickscore.processor_path"}


def test_rewritten_model_weights_rerun_every_job_that_reads_the_model(finished, rewritten):
    rewritten(Path(config(finished)["model"]["path"]) / UNET)
    planned = dry_run(finished)
    assert planned == iteration("generate", "score", "pairs", "train", "export", "eval") + Counter(
        {("eval_base", ""): 1}) + watched() + REPORT + PREFLIGHT


def test_rewritten_reward_weights_rerun_scoring_and_what_follows_not_the_rollouts(finished, rewritten):
    model_path = Path(config(finished)["rewards"]["pickscore"]["model_path"])
    rewritten(next(model_path.glob("*.safetensors")))
    planned = dry_run(finished)
    assert planned == iteration("score", "pairs", "train", "export", "eval") + Counter(
        {("eval_base", ""): 1}) + watched() + REPORT + PREFLIGHT
    assert ("generate", "it=000") not in planned


def test_a_new_mtime_or_another_spelling_of_the_same_files_reruns_nothing(finished):
    model = Path(config(finished)["model"]["path"])
    for file in model.rglob("*"):
        file.touch()  # same bytes, newer: a copy, a restore from a backup
    respelled = {"model": {"path": f"{model.parent}/./{model.name}/"},
                 "prompts": {"train": str(ROOT / "resources/prompts//train.txt")}}
    assert dry_run(finished, respelled) == Counter()


# What a change of the config's text alone redoes: the report's copy of the config (its params are the whole config).
CONFIG_RECORD = Counter({("report_config", ""): 1, ("all", ""): 1})


def test_the_same_files_at_another_path_rerun_nothing_but_the_reports_config(finished, tmp_path):
    """Jobs read the model and the reward checkpoints by content (host/input_links.py): a moved or
    re-downloaded copy of the same files redoes no job that reads them."""
    model = Path(shutil.copytree(config(finished)["model"]["path"], tmp_path / "moved-model"))
    pickscore = shutil.copytree(Path(config(finished)["rewards"]["pickscore"]["model_path"]).parent, tmp_path / "ps")
    moved = {"model": {"path": str(model)},
             "rewards": {"pickscore": {"model_path": str(pickscore / "clip_model"),
                                       "processor_path": str(pickscore / "clip_processor")}}}
    assert dry_run(finished, moved) == CONFIG_RECORD
    link = finished / "results/.inputs" / read_provenance(finished / "results/iter_000/samples.parquet")["inputs"]["model.path"]
    assert link.is_symlink()  # placed by the run that made the files, pointing at the model it read


def hub_cache(root: Path, model: Path, revision: str) -> Path:
    """A hub cache holding ``model`` as org/tiny at ``revision``, refs/main naming it (as a download lays it out)."""
    repo = root / "models--org--tiny"
    shutil.copytree(model, repo / "snapshots" / revision)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision


def test_a_hub_id_is_its_cached_snapshot_and_a_moved_refs_main_reruns_the_model_jobs(finished, tmp_path, rewritten):
    """model.path org/tiny resolves at startup to the snapshot refs/main names in the hub cache: the same
    weights as the run's folder rerun no model job; refs/main moved to a revision with other weights
    reruns every job that reads the model."""
    cache = tmp_path / "hub"
    hub_cache(cache, Path(config(finished)["model"]["path"]), "a" * 40)
    overlay = finished / "change.yaml"
    overlay.write_text(yaml.safe_dump({"model": {"path": "org/tiny"}}))
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    assert planned_jobs(snakemake(finished, "-n", overlays=(overlay,), env=env)) == CONFIG_RECORD
    other = hub_cache(cache, Path(config(finished)["model"]["path"]), "b" * 40)
    rewritten(other / UNET)
    planned = planned_jobs(snakemake(finished, "-n", overlays=(overlay,), env=env))
    assert ("generate", "it=000") in planned and ("eval_base", "") in planned and ("train", "it=000") in planned


def test_what_only_the_rollouts_read_leaves_the_base_eval(finished, tmp_path):
    """The rollouts' steps, group size, eta and prompt file (the same prompts in another file): generate
    reruns, the base eval, which reads none of them, does not."""
    prompts = tmp_path / "train.txt"
    prompts.write_text((ROOT / "resources/prompts/train.txt").read_text())
    planned = dry_run(finished, {"generate": {"steps": 3, "images_per_prompt": 3, "eta": 0.5},
                                 "prompts": {"train": str(prompts)}})
    assert ("generate", "it=000") in planned
    assert ("eval_base", "") not in planned


@pytest.mark.parametrize("name, redone", [
    ("latents.safetensors", ("generate", "score", "pairs", "train", "export", "eval")),
    ("metrics/eval.json", ("eval",))], ids=["latents", "eval-metrics"])
def test_deleting_a_stage_file_redoes_the_stage_and_what_follows(finished, tmp_path, name, redone):
    """Not only the tables: a file no later job reads (an eval's metrics) or that only finished jobs read
    (the latents) is a target too."""
    run = copy_run(finished, tmp_path / "copy")
    (run / "results/iter_000" / name).unlink()
    assert dry_run(run) == iteration(*redone) + watched() + REPORT + (
        PREFLIGHT if "pairs" in redone else Counter())


def test_a_run_without_its_snakemake_folder_still_reruns_what_a_changed_config_changes(finished, tmp_path):
    """results/ keeps a copy of Snakemake's records (runtime/job_records.py): with .snakemake/ gone, a
    changed train.steps plans what it plans with the records there; without the copy it planned nothing."""
    change = {"train": {"steps": 3}}
    with_records = dry_run(copy_run(finished, tmp_path / "whole"), change)
    assert ("train", "it=000") in with_records
    moved = copy_run(finished, tmp_path / "moved")
    shutil.rmtree(moved / ".snakemake")
    assert (moved / "results/.snakemake-records").is_dir()
    assert dry_run(moved, change) == with_records
    assert dry_run(moved) == Counter()  # the records given back: nothing else is planned
    shutil.rmtree(moved / ".snakemake")
    shutil.rmtree(moved / "results/.snakemake-records")
    assert dry_run(moved, change) == Counter()  # what Snakemake does on its own
