"""Kill -9 harness: SIGKILL the workflow at seeded random moments in every stage, rerun, compare.

One uninterrupted reference run first. Then each trial starts the same run in a fresh folder and,
for each of its kills, starts the same command, waits until a job of the chosen stage starts, waits
a seeded random fraction of that job's duration in the reference run, and sends SIGKILL to the
whole process group (snakemake and its jobs, as a pre-empted or OOM-killed node would). With
--at-start (what the test suite does) each kill lands instead at the start of its job: as soon as the
job's log has been written in this attempt (its first line, "running in a fork of the warm worker"),
so that short jobs (pairs, export) are interrupted too. After its
kills the trial reruns the same command until it completes (no --unlock, no cleanup) and compares
with the reference: the final LoRA's sha256, the final eval table, and every iteration's LoRA.
Kills cycle through the stages (generate, score, pairs, train, export, eval, tracking) and a train
that has saved an in-stage checkpoint, so 20 kills aim at each about 2-3 times (a kill also stops
whatever runs beside its target, e.g. eval beside the loop). Trains resumed from their in-stage checkpoint are listed with the
step they resumed from.

Usage: python bench/kill_harness.py [--kills 20] [--kills-per-trial 1] [--seed 0] [--at-start]
                                    [--model DIR] [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from rewardloop.artifacts import benchmark_seconds
from rewardloop.models.loading import LORA_WEIGHTS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from workflow_helpers import tiny_overlay  # noqa: E402  (one tiny run config for tests and harness)

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

# The stages a kill aims at, and the rules that make them.
STAGES = {
    "generate": ("generate",),
    "score": ("score",),
    "pairs": ("pairs", "advantages"),
    "train": ("train",),
    "export": ("export",),
    "eval": ("eval", "eval_base"),
    "tracking": ("tracking_run", "track_iteration", "track_base"),
}
# Kill targets: a job of each stage from its start (process start, imports, model load included),
# and a train that has saved an in-stage checkpoint (mid-epoch: the rerun must resume from it).
MID_TRAIN = "train mid-epoch"
# (Mid-epoch before train: when several kills follow each other in one trial, a train kill that lands
# after a checkpoint would leave a state behind that the mid-epoch kill could not tell from its own.)
TARGETS = ("generate", "score", "pairs", MID_TRAIN, "train", "export", "eval", "tracking")
JOB_START = re.compile(r"^(?:local)?rule (\w+):$")
JOB_LOG = re.compile(r"^log: (\S+)$")
JOB_ID = re.compile(r"^jobid: (\d+)$")
JOB_END = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def run_overlay(model_dir: Path) -> dict:
    """The tests' 2-iteration tiny run, with MLflow tracking (sqlite in results/) and a train long
    enough (60 steps, state saved every 10; a few seconds) that a kill can land between checkpoints."""
    return tiny_overlay(model_dir, train={"steps": 60, "batch_size": 4, "checkpointing_steps": 10},
                        tracking={"enabled": True}, resources={"threads": 1})


def command(workdir: Path, cores: int = 2) -> list[str]:
    return [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
            "--configfile", str(workdir / "run.yaml"), "--cores", str(cores)]


def job_env() -> dict:
    # One thread per job whatever the machine: the result must not depend on the thread count.
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "MLFLOW_TRACKING_URI": "", "PYTHONUNBUFFERED": "1"}


def prepare(workdir: Path, overlay: dict) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "run.yaml").write_text(yaml.safe_dump(overlay))
    return workdir


def run_to_completion(workdir: Path, max_attempts: int = 3) -> int:
    """Rerun the same command until it exits 0; returns the number of attempts."""
    for attempt in range(1, max_attempts + 1):
        done = subprocess.run(command(workdir), capture_output=True, text=True, env=job_env())
        (workdir / f"rerun_{attempt}.log").write_text(done.stdout + done.stderr)
        if done.returncode == 0:
            return attempt
    raise RuntimeError(f"{workdir}: the rerun did not complete in {max_attempts} attempts; "
                       f"see {workdir}/rerun_{max_attempts}.log")


@dataclass
class Kill:
    stage: str
    delay: float
    occurrence: int = 0  # aim at the stage's job that starts (occurrence + 1)-th in the run
    at_start: bool = False  # count ``delay`` from the job's first log line, not from its announcement
    fired: bool = False
    running: list[str] = field(default_factory=list)  # the jobs the kill interrupted
    train_state_step: int | None = None  # the in-stage checkpoint's step on disk after the kill

    def stages_hit(self) -> set[str]:
        """The stages whose jobs the kill interrupted (started and not finished when Snakemake died)."""
        hit = {s for s, rules in STAGES.items() if set(rules) & set(self.running)}
        if self.stage == MID_TRAIN and "train" in hit and self.train_state_step:
            hit.add(MID_TRAIN)
        return hit


def killed_run(workdir: Path, kill: Kill, timeout: float = 600) -> Kill:
    """Start the command; SIGKILL its process group ``kill.delay`` s after the ``kill.occurrence``-th
    job of ``kill.stage`` (counting from 0) starts, or for a mid-epoch kill after iteration
    ``kill.occurrence``'s train saved a checkpoint. A job starts when Snakemake announces it ("rule X:"),
    or with ``kill.at_start`` when its log has been written in this attempt (the job's process runs
    the stage's script: in a fork of the warm worker, the default, its first line says so at once).
    When the run ends first, the kill does not fire.

    ``kill.running`` is then what the kill interrupted: the jobs Snakemake had announced and not
    reported finished (its "Finished jobid" lines) when it died, read to the end of its output."""
    rules = STAGES.get(kill.stage, ())
    since = time.time()
    proc = subprocess.Popen(command(workdir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=job_env(), start_new_session=True)
    jobs: dict[str, dict] = {}  # jobid -> {"rule", "log"} of the jobs announced and not finished
    started = threading.Event()
    target: list[dict] = []  # the aimed-at job, once announced
    seen = [0]  # jobs of the stage started so far

    def follow() -> None:
        job: dict = {}
        for line in proc.stdout:
            line = line.strip()
            if m := JOB_START.match(line):
                job = {"rule": m.group(1), "log": None}
                if m.group(1) in rules:
                    seen[0] += 1
                    if seen[0] == kill.occurrence + 1:
                        target.append(job)
                        if not kill.at_start:
                            started.set()
            elif m := JOB_LOG.match(line):
                job["log"] = m.group(1)
            elif m := JOB_ID.match(line):
                jobs[m.group(1)] = job
            elif m := JOB_END.match(line):
                jobs.pop(m.group(1), None)

    def running() -> list[str]:
        return [job["rule"] for job in list(jobs.values())]

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while not started.is_set() and proc.poll() is None and time.monotonic() < deadline:
        started.wait(0.005 if kill.at_start and kill.stage != MID_TRAIN else 0.05)
        if kill.stage == MID_TRAIN:
            if "train" in running() and saved_train_step(workdir, kill.occurrence, since):
                started.set()
        elif kill.at_start and target and written_since(workdir, target[0]["log"], since):
            started.set()
    if started.is_set():
        end = time.monotonic() + kill.delay
        while proc.poll() is None and time.monotonic() < end:
            time.sleep(0.005)
        if proc.poll() is None:
            kill.fired = kill_group(proc)
    else:
        kill_group(proc)
    proc.wait()
    reader.join(timeout=10)
    if kill.fired:
        kill.running = running()
    kill.train_state_step = saved_train_step(workdir)
    return kill


def written_since(workdir: Path, rel: str | None, since: float) -> bool:
    """Whether the file ``rel`` (under ``workdir``) was written at or after Unix time ``since``."""
    if not rel:
        return False
    try:
        return (workdir / rel).stat().st_mtime >= since
    except FileNotFoundError:
        return False


def kill_group(proc: subprocess.Popen) -> bool:
    """SIGKILL the process group of ``proc``; False when it had already ended."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def saved_train_step(workdir: Path, iteration: int | None = None, since: float = 0.0) -> int | None:
    """The step of the in-stage checkpoint of an unfinished train, of ``iteration`` or any, saved
    after Unix time ``since`` (None when there is none)."""
    from safetensors import safe_open

    pattern = "iter_*" if iteration is None else f"iter_{iteration:03d}"
    for state in sorted(workdir.glob(f"results/{pattern}/train/state/state.safetensors")):
        if not (state.parents[1] / LORA_WEIGHTS).exists() and state.stat().st_mtime >= since:
            with safe_open(str(state), "np") as fh:
                return int(json.loads(fh.metadata()["rewardloop_state"])["step"])
    return None


def outcome(workdir: Path, iterations: int) -> dict:
    """What must not depend on the kills: every iteration's LoRA sha256 and the final eval table."""
    results = workdir / "results"
    loras = [sha256(results / f"iter_{it:03d}/checkpoint/{LORA_WEIGHTS}") for it in range(iterations)]
    final_eval = pd.read_parquet(results / f"iter_{iterations - 1:03d}/eval.parquet")
    return {"loras": loras, "final_lora": loras[-1], "final_eval": final_eval}


def same_outcome(a: dict, b: dict) -> bool:
    return a["loras"] == b["loras"] and a["final_eval"].equals(b["final_eval"])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stage_jobs(workdir: Path) -> dict[str, list[float]]:
    """Each stage's job durations in a finished run (from Snakemake's benchmark files)."""
    stage_of = {"advantages": "pairs", "run": "tracking"}  # benchmark file stem -> stage
    jobs: dict[str, list[float]] = {}
    for tsv in (workdir / "results/benchmarks").rglob("*.tsv"):
        stage = stage_of.get(tsv.stem, tsv.stem)
        seconds = benchmark_seconds(tsv)
        if stage in STAGES and seconds:
            jobs.setdefault(stage, []).append(seconds)
    return jobs


def plan_kills(count: int, jobs: dict[str, list[float]], seed: int, first_job: bool = False,
               at_start: bool = False) -> list[Kill]:
    """``count`` kills cycling through the targets, each at a seeded one of the stage's jobs (say
    iteration 1's export; with ``first_job``, the next one to start: for several kills in a row)
    and a seeded point within 90 % of the stage's shortest job, so that most land while that job
    still runs. Mid-epoch kills land within a second of a train's checkpoint. With ``at_start``,
    every kill lands as soon as its job has started (its log written; mid-epoch: its checkpoint
    saved), so that each one interrupts the job it aims at, however short."""
    rng = random.Random(seed)
    jobs = {**jobs, MID_TRAIN: [1.0 / 0.9] * len(jobs.get("train", [0]))}
    kills = []
    for k in range(count):
        stage = TARGETS[k % len(TARGETS)]
        durations = jobs.get(stage, [5.0])
        occurrence = rng.randrange(len(durations))
        delay = round(rng.uniform(0.0, 0.9 * min(durations)), 2)
        kills.append(Kill(stage=stage, occurrence=0 if first_job else occurrence, at_start=at_start,
                          delay=0.0 if at_start else delay))
    return kills


def trial(workdir: Path, overlay: dict, kills: list[Kill]) -> tuple[list[Kill], int]:
    """Apply ``kills`` one after the other to a fresh run, then rerun it to completion."""
    prepare(workdir, overlay)
    for kill in kills:
        killed_run(workdir, kill)
    return kills, run_to_completion(workdir)


def resumed_trains(workdir: Path) -> dict[int, int]:
    """iteration -> the step its train resumed from (only those that resumed)."""
    resumed = {}
    for metrics in sorted(workdir.glob("results/iter_*/metrics/train.json")):
        step = json.loads(metrics.read_text()).get("resumed_from_step", 0)
        if step:
            resumed[int(metrics.parent.parent.name[5:])] = step
    return resumed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--kills-per-trial", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--at-start", action="store_true",
                        help="kill each job as soon as it has started (its log written), as the tests do")
    parser.add_argument("--model", type=Path, help="a built tiny model (default: build one, ~30 s)")
    parser.add_argument("--keep", type=Path, help="keep the run folders here")
    args = parser.parse_args()

    scratch = Path(args.keep or tempfile.mkdtemp(prefix="rewardloop-kill-"))
    model = args.model
    if model is None:
        from rewardloop.models.tiny.sd15 import build_tiny_sd15

        model = scratch / "tiny-sd15"
        build_tiny_sd15(model, seed=0, vae_steps=40, unet_steps=60, progress=False)  # returns its stats
    overlay = run_overlay(model)
    iterations = overlay["iterations"]

    started = time.perf_counter()
    reference_dir = prepare(scratch / "reference", overlay)
    run_to_completion(reference_dir, max_attempts=1)
    reference = outcome(reference_dir, iterations)
    jobs = stage_jobs(reference_dir)
    print(f"reference run: {time.perf_counter() - started:.0f} s; final LoRA sha256 {reference['final_lora'][:16]}")
    print("stage jobs (s): " + "; ".join(f"{s} " + " ".join(f"{d:.1f}" for d in sorted(ds)) for s, ds in jobs.items()))

    kills = plan_kills(args.kills, jobs, args.seed, at_start=args.at_start)
    per_trial = max(1, args.kills_per_trial)
    fired = identical = trials = 0
    by_stage: dict[str, list[int]] = {s: [0, 0] for s in TARGETS}  # stage -> [landed in it, identical]
    for start in range(0, len(kills), per_trial):
        trials += 1
        workdir = scratch / f"trial_{trials:02d}"
        batch, attempts = trial(workdir, overlay, kills[start:start + per_trial])
        same = same_outcome(outcome(workdir, iterations), reference)
        identical += same
        for kill in batch:
            fired += kill.fired
            for stage in kill.stages_hit():
                by_stage[stage][0] += 1
                by_stage[stage][1] += same
            where = ",".join(kill.running) if kill.fired else "(stage already done: no kill)"
            saved = f", train state on disk at step {kill.train_state_step}" if kill.train_state_step else ""
            start = "its log written" if kill.at_start else "start"
            print(f"trial {trials:2d}: kill in {kill.stage:15s} job #{kill.occurrence} {start} +{kill.delay:5.2f} s, "
                  f"running [{where}]{saved}")
        resumed = resumed_trains(workdir)
        print(f"          rerun: {attempts} attempt(s); identical to the reference: {same}"
              + (f"; train resumed from step {resumed}" if resumed else ""))
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"\nkills fired: {fired} of {len(kills)} planned; trials identical to the uninterrupted run: "
          f"{identical}/{trials}")
    print("jobs interrupted per stage (all / in trials identical to the reference): "
          + ", ".join(f"{s} {f}/{i}" for s, (f, i) in by_stage.items()))
    print(f"total {time.perf_counter() - started:.0f} s")
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
