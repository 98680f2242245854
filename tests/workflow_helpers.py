"""Running the real workflow from tests: a tiny-model config overlay and a snakemake runner."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import yaml

from rewardloop.runtime import job_records

from rewardloop.config import deep_merge

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def tiny_overlay(tiny_model, **sections) -> dict:
    """A small, fast run on ``tiny_model``; ``sections`` override (deep-merged) any key."""
    base = {
        "iterations": 2,
        "model": {"path": str(tiny_model), "build_tiny": False},
        "prompts": {"train": str(ROOT / "resources/prompts/train.txt"),
                    "eval": str(ROOT / "resources/prompts/eval.txt")},
        "generate": {"prompts_per_iteration": 6, "images_per_prompt": 3, "steps": 4, "batch_size": 32},
        "train": {"steps": 4, "batch_size": 4, "checkpointing_steps": 2},
        "eval": {"seeds": [0], "steps": 4},
        # the tests' trains in one thread, as their figures were measured (config.yaml gives the default run's 2)
        "resources": {"train_threads": 1},
    }
    return deep_merge(base, sections)


def write_overlay(workdir: Path, overlay: dict) -> Path:
    path = Path(workdir) / "test.yaml"
    path.write_text(yaml.safe_dump(overlay))
    return path


def snakemake(workdir: Path, *args: str, env: dict | None = None, cores: int = 2,
              overlays: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    """Run the workflow in ``workdir`` on its test.yaml (then ``overlays``, later files winning);
    on failure, raise with stderr and job logs."""
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(Path(workdir) / "test.yaml"), *map(str, overlays), "--cores", str(cores), *args]
    result = subprocess.run(cmd, capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    if result.returncode != 0:
        logs = "\n".join(f"== {p}\n{p.read_text()[-3000:]}" for p in sorted(Path(workdir).glob("results/logs/**/*.log")))
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stderr[-5000:]}\n{logs}")
    return result


def file_digests(folder: Path, skip: tuple[str, ...] = (), mtime: bool = True) -> dict:
    """{path under ``folder``: (sha256, mtime_ns)} (sha256 only with ``mtime=False``) of every file (not the
    copy of Snakemake's records, runtime/job_records.py)
    but those whose relative path starts with ``skip``: what "no earlier artifact changed" compares."""
    digests = {}
    for path in sorted(Path(folder).rglob("*")):
        rel = str(path.relative_to(folder))
        if job_records.FOLDER in path.parts:  # Snakemake's bookkeeping, like .snakemake/: copied at a run's end
            continue
        if path.is_file() and not rel.startswith(skip):
            sha = hashlib.sha256(path.read_bytes()).hexdigest()
            digests[rel] = (sha, path.stat().st_mtime_ns) if mtime else sha
    return digests


def copy_run(workdir: Path, dest: Path) -> Path:
    """A copy of a finished run (results/, Snakemake's metadata, test.yaml; mtimes kept), for a test
    that changes it: the original stays as it was for the others."""
    shutil.copytree(workdir, dest, symlinks=True)
    return dest


_RULE_LINE = re.compile(r"^(?:local)?rule (\w+):$")
_TOTAL_LINE = re.compile(r"^total\s+(\d+)$")


def planned_jobs(result: subprocess.CompletedProcess) -> Counter:
    """The jobs a dry run (``snakemake -n``) would run: {(rule, wildcards): count}, wildcards as
    Snakemake prints them ("it=001", "" for none), from its "rule X:" blocks; checked against the
    total of its job summary table, so that a change in the output format fails loudly."""
    jobs: list[list[str]] = []
    total = 0
    for line in result.stdout.splitlines():
        if m := _RULE_LINE.match(line):
            jobs.append([m.group(1), ""])
        elif jobs and line.startswith("    wildcards: "):
            jobs[-1][1] = line.split(":", 1)[1].strip()
        elif m := _TOTAL_LINE.match(line.strip()):
            total = int(m.group(1))
    if not jobs and "Nothing to be done" not in result.stdout + result.stderr:
        raise ValueError(f"no job and no 'Nothing to be done' in the dry run's output:\n{result.stdout[-3000:]}")
    if len(jobs) != total:
        raise ValueError(f"{len(jobs)} 'rule X:' blocks but a job summary total of {total}")
    return Counter(map(tuple, jobs))


def immutable_folder(folder: Path):
    """Make ``folder`` and everything in it but links immutable (``chattr +i``, ext4 and the like): a folder
    that not even root may write, as a read-only one is to its owner (tests run as root, for whom chmod a-w
    changes nothing). Skips the test where unsupported. Returns ``chattr(flag)`` to undo it with ``"-i"``."""
    import pytest

    tool = shutil.which("chattr")
    paths = [str(p) for p in (folder, *folder.rglob("*")) if not p.is_symlink()]

    def chattr(flag: str) -> bool:
        return bool(tool) and subprocess.run([tool, flag, *paths], capture_output=True).returncode == 0

    if not chattr("+i"):
        chattr("-i")
        pytest.skip("chattr +i is not supported here")
    return chattr
