"""A rerun cannot destroy finished work (src/rewardloop/runtime/previous_versions.py), nor be planned by a
config's spelling rather than its values (runtime/canonical_params.py), on the real workflow.

From a copy of the session's finished 2-iteration run, a changed config reruns jobs whose finished
outputs Snakemake deletes before each job starts. When the job then fails, or the run is killed, the
finished files come back byte for byte (same inode: same mtime), and Snakemake still knows which
config they belong to: the original config plans nothing of theirs, the changed one plans them again.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from rewardloop.runtime import canonical_params, previous_versions
from workflow_helpers import ROOT, SNAKEMAKE, copy_run, file_digests, planned_jobs, snakemake

pytestmark = pytest.mark.workflow

PER_ATTEMPT = ("logs/", "report/", "benchmarks/report/")  # written anew by each attempt, or by report_config
STEPS_CHANGED = "train={steps: 6}"  # reruns iteration 0's train and everything after it
# Iteration 0's preflight checks its rollouts against the changed training: it runs before the train, and succeeds.
REDONE_BEFORE_TRAIN = {"iter_000/preflight.json", "iter_000/preflight_figures.json",
                       "benchmarks/iter_000/preflight.tsv", "benchmarks/iter_000/preflight_gate.tsv"}
TRAIN_OUTPUTS = {"iter_000/train/pytorch_lora_weights.safetensors", "iter_000/metrics/train.json",
                 "benchmarks/iter_000/train.tsv"}


def finished(results: Path) -> dict:
    """{path: (sha256, mtime)} of the finished files an attempt must leave as they were."""
    return {k: v for k, v in file_digests(results, skip=(".rewardloop.lock",)).items() if not k.startswith(PER_ATTEMPT)}


def params_changed(workdir: Path, *args: str) -> set[str]:
    """The outputs whose recorded params differ from the config's (Snakemake's --list-changes params)."""
    return set(snakemake(workdir, "--list-changes", "params", *args).stdout.split())


def planned(workdir: Path, *args: str) -> set:
    """The jobs a dry run with these arguments plans: {(rule, wildcards)}."""
    return set(planned_jobs(snakemake(workdir, "-n", *args)))


def test_a_job_that_fails_on_rerun_gives_back_the_finished_files_it_removed(finished_run, tmp_path):
    workdir = copy_run(finished_run, tmp_path / "run")
    results = workdir / "results"
    before = finished(results)
    # A 64 KiB file size limit: the changed train writes its state, over the limit, and fails.
    command = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), "--configfile",
               str(workdir / "test.yaml"), "--cores", "1", "--config", STEPS_CHANGED]
    done = subprocess.run(["bash", "-c", "ulimit -f 64 && exec \"$@\"", "bash", *command], capture_output=True,
                          text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "rule train failed" in output, output[-3000:]
    assert "rewardloop: a failed job had removed finished work: restored" in output, output[-3000:]
    after = finished(results)
    assert set(after) == set(before)  # nothing is missing
    assert {path: after[path] for path in TRAIN_OUTPUTS} == {path: before[path] for path in TRAIN_OUTPUTS}
    assert {path for path in before if after[path] != before[path]} <= REDONE_BEFORE_TRAIN
    assert not previous_versions.folder_of(results).exists()
    # Snakemake's records are the finished files' own: the LoRA is the original config's, not the
    # changed one's (the failed job's record would say so), and the changed config still redoes it.
    lora = "results/iter_000/train/pytorch_lora_weights.safetensors"
    assert lora not in params_changed(workdir)
    assert lora in params_changed(workdir, "--config", STEPS_CHANGED)


def test_a_killed_rerun_gives_back_the_finished_files_before_the_next_plan(finished_run, tmp_path):
    workdir = copy_run(finished_run, tmp_path / "run")
    results = workdir / "results"
    before = finished(results)
    eval_table = results / "base/eval.parquet"
    command = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), "--configfile",
               str(workdir / "test.yaml"), "--cores", "1", "--config", "eval={steps: 3}"]
    started_ns = time.time_ns()
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + 300
        while eval_table.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # Snakemake deletes the base eval's outputs as its job starts
        assert not eval_table.exists(), "the base eval's rerun did not start"
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # the run and its jobs, as a power loss would
        run.wait()
    assert previous_versions.folder_of(results).is_dir()
    plan = snakemake(workdir, "-n")
    assert "rewardloop: a killed run had removed finished work: restored" in plan.stderr, plan.stderr[-3000:]
    after = finished(results)
    assert set(after) == set(before)  # nothing is missing
    killed_job = {"base/eval.parquet", "base/metrics/eval.json"}
    assert {path: after[path] for path in killed_job} == {path: before[path] for path in killed_job}
    # Any other change is a file that a job of the killed run finished (evals and what reads them)
    assert all(after[path][1] >= started_ns for path in before if after[path] != before[path])
    assert not previous_versions.folder_of(results).exists()


def reordered(value):
    """``value`` with every dict's keys in reverse order: the same config, spelled otherwise."""
    if isinstance(value, dict):
        return {key: reordered(value[key]) for key in reversed(list(value))}
    return [reordered(item) for item in value] if isinstance(value, list) else value


def test_restating_a_value_or_reordering_a_configs_keys_reruns_nothing(finished_run, tmp_path):
    """Issue 46 §1: params are compared by value, never by the order in which a config lists its keys."""
    workdir = copy_run(finished_run, tmp_path / "run")
    before = file_digests(workdir / "results")
    overlay = yaml.safe_load((workdir / "test.yaml").read_text())
    restated = f"model={{path: {overlay['model']['path']}}}"  # the path it already had
    (workdir / "reordered.yaml").write_text(yaml.safe_dump(reordered(overlay), sort_keys=False))
    reordered_config = ("--configfile", str(workdir / "reordered.yaml"))
    assert not planned(workdir, "--config", restated)
    assert not planned(workdir, *reordered_config)
    assert not planned(workdir, *reordered_config, "--config", restated)
    # a changed value still reruns what it changes
    assert ("train", "it=000") in planned(workdir, *reordered_config, "--config", STEPS_CHANGED)
    assert file_digests(workdir / "results") == before


def test_params_recorded_by_an_older_version_in_key_order_are_compared_by_value(finished_run, tmp_path):
    """Records written before params were canonical list a dict's keys as the config did: the first run of
    this version rewrites them (same values) instead of rerunning the whole run."""
    workdir = copy_run(finished_run, tmp_path / "run")
    metadata = workdir / ".snakemake/metadata"
    (workdir / ".snakemake" / canonical_params.MARKER).unlink(missing_ok=True)
    rewritten = 0
    for record in (path for path in metadata.rglob("*") if path.is_file()):
        data = json.loads(record.read_text())
        old = [repr(reordered(ast.literal_eval(p))) if p.startswith("{") else p for p in data["params"]]
        rewritten += old != data["params"]
        record.write_text(json.dumps({**data, "params": old}))
    assert rewritten > 10
    before = file_digests(workdir / "results")
    assert not planned(workdir)
    for record in (path for path in metadata.rglob("*") if path.is_file()):
        params = json.loads(record.read_text())["params"]
        assert params == [canonical_params.canonical_repr(p) for p in params]
    assert file_digests(workdir / "results") == before


def test_a_prompt_file_moved_or_saved_otherwise_with_the_same_prompts_reruns_nothing(finished_run, tmp_path):
    """Issue 46 §7: a prompt set is known by its prompts (runtime/prompt_pins.py). The same prompts in another
    file, at another place, with Windows line endings and a byte-order mark, plan nothing; two prompts that swap
    lines (and so ids) plan their pin's job and what reads it (the rollouts of both iterations, not the base eval,
    which reads the eval prompts). A dry run writes nothing."""
    workdir = copy_run(finished_run, tmp_path / "run")
    before = file_digests(workdir / "results")
    source = Path(yaml.safe_load((workdir / "test.yaml").read_text())["prompts"]["train"])
    text = source.read_text()
    moved = workdir / "elsewhere" / "the train prompts.txt"
    moved.parent.mkdir()
    moved.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    overlay = workdir / "moved.yaml"
    overlay.write_text(yaml.safe_dump({"prompts": {"train": str(moved)}}))
    assert not planned_jobs(snakemake(workdir, "-n", overlays=(overlay,)))
    lines = text.splitlines()
    moved.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")  # two prompts swap their ids
    plan = set(planned_jobs(snakemake(workdir, "-n", overlays=(overlay,))))
    assert {("pin_prompts", ""), ("generate", "it=000"), ("generate", "it=001")} <= {
        (rule, "" if rule == "pin_prompts" else wildcards) for rule, wildcards in plan}
    assert ("eval_base", "") not in plan
    assert file_digests(workdir / "results") == before  # planning wrote nothing, not even the new pin


def test_records_that_name_the_configured_prompt_file_are_pointed_at_its_pin(finished_run, tmp_path):
    """Runs finished before prompt sets were pinned recorded the configured file as their jobs' input and in
    their params: the first run of this version names the pin of the same prompts instead (once), and plans
    nothing; the pins are written with the source file's mtime (else they would be newer than every output)."""
    from rewardloop.runtime import prompt_pins

    workdir = copy_run(finished_run, tmp_path / "run")
    metadata, pins = workdir / ".snakemake/metadata", workdir / "results" / prompt_pins.FOLDER
    configured = yaml.safe_load((workdir / "test.yaml").read_text())["prompts"]
    by_pin = {str(pin.relative_to(workdir)): configured[pin.name.split("-")[0]] for pin in pins.iterdir()}
    assert sorted(Path(p).name.split("-")[0] for p in by_pin) == ["eval", "train"]
    (workdir / ".snakemake" / prompt_pins.MARKER).unlink(missing_ok=True)
    shutil.rmtree(pins)  # as before pins: neither the folder nor records naming it
    old = 0
    for record in (path for path in metadata.rglob("*") if path.is_file()):
        text = record.read_text()
        for pin, source in by_pin.items():
            text = text.replace(json.dumps(repr(pin))[1:-1], json.dumps(repr(source))[1:-1]).replace(
                json.dumps(pin), json.dumps(source))
        old += text != record.read_text()
        record.write_text(text)
    assert old >= 8  # generate, eval and eval_base of every iteration, report_config
    before = file_digests(workdir / "results")
    assert not planned(workdir)
    after = file_digests(workdir / "results")
    assert {path: after[path] for path in before} == before
    for pin, source in by_pin.items():
        assert (workdir / pin).stat().st_mtime_ns == Path(source).stat().st_mtime_ns
    for record in (path for path in metadata.rglob("*") if path.is_file()):
        assert not any(source in record.read_text() for source in by_pin.values()), record
