"""Shared fixtures: offline mode, the repository root, tiny models and a finished run built once per session
(whatever the number of xdist workers: tests/built_once.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from built_once import built_once
from rewardloop.host import cpu_kernels
from xdist_schedule import longest_first_scheduler

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The kernels a workflow run pins on the CPU (config cpu_kernels: auto), here too: a stage called in a test
# computes what the same stage computes in a job (and the same bytes on every x86-64 CPU with AVX2).
cpu_kernels.pin("auto", "cpu")
# Two xdist workers share the cores: OpenMP threads that spin while they wait for each other then steal the
# other worker's time (a short 2-thread tiny build and iteration beside another job: 111.5 + 31.2 s with
# libgomp's default waits, 48.1 + 8.5 s passive, the same bytes). Passive waits change scheduling only.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if "MUTANT_UNDER_TEST" in os.environ:
    # `make mutation` forks a child per mutant from a process whose tests made progress bars. tqdm's default
    # lock is a semaphore shared across fork and its monitor thread takes it every 10 s: one child killed on
    # its time limit while holding it left every later bar waiting forever (measured: the parent's monitor and
    # each later Trainer hung in TqdmDefaultWriteLock.acquire), and mutmut scores such hangs as caught.
    import threading

    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    tqdm.monitor_interval = 0
ROOT = Path(__file__).resolve().parents[1]
# The thread count the session's tiny models are built with: a build's bytes depend on it, and torch's count
# is whatever the process last set (test modules set 1 at import, a stage called in-process sets its own), so
# a model built on the default would differ between a whole-suite run and a run of one file.
BUILD_THREADS = 1


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A briefly pretrained tiny SD1.5-family model (seconds, not minutes: plumbing tests only).
    Built once per session (tests/built_once.py); tests must not change it (copy it first)."""
    from rewardloop.models.tiny.sd15 import build_tiny_sd15

    folder = built_once(tmp_path_factory, "tiny-sd15", lambda root: build_tiny_sd15(
        root / "tiny-sd15", seed=0, vae_steps=40, unet_steps=60, num_threads=BUILD_THREADS, progress=False))
    return folder / "tiny-sd15"


@pytest.fixture(scope="session")
def tiny_sdxl_model(tmp_path_factory) -> Path:
    """A random-init tiny SDXL-architecture model (two text encoders, pooled embeds, time ids)."""
    from rewardloop.models.tiny.sdxl import build_tiny_sdxl

    folder = built_once(tmp_path_factory, "tiny-sdxl", lambda root: build_tiny_sdxl(root / "tiny-sdxl", seed=0))
    return folder / "tiny-sdxl"


@pytest.fixture(scope="session")
def tiny_sd3_model(tmp_path_factory) -> Path:
    """A briefly pretrained tiny SD3-family model (seconds: plumbing and numerics tests only)."""
    from rewardloop.models.tiny.sd3 import build_tiny_sd3

    folder = built_once(tmp_path_factory, "tiny-sd3", lambda root: build_tiny_sd3(
        root / "tiny-sd3", seed=0, vae_steps=30, unet_steps=40, num_threads=BUILD_THREADS,
        progress=False))
    return folder / "tiny-sd3"


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, tiny_model) -> Path:
    """A finished run of the workflow, built once per session: the default config.yaml with the
    tests' small overlay (``workflow_helpers.tiny_overlay``) on ``tiny_model``, MLflow tracking off,
    rollouts in 3 batches of 6 (so that 2 shards of generate or score are a valid config).

    The folder is what ``snakemake`` leaves after a complete 2-iteration run started in it:
    ``test.yaml`` (the overlay, given as ``--configfile``), ``results/`` (``base/``, ``iter_000/``,
    ``iter_001/`` with samples, scores, pairs, checkpoint, eval; ``report/``, logs, benchmarks) and
    ``.snakemake/``. Read it, or dry-run it (``snakemake -n`` writes only under ``.snakemake/``),
    but never change it: every test of the session sees the same folder. A test that changes a run
    works on ``workflow_helpers.copy_run(finished_run, tmp_path / "run")``. tests/workflow/test_workflow.py
    checks after each of its tests that no file of it changed.
    """
    from workflow_helpers import snakemake, tiny_overlay, write_overlay

    def run(work: Path) -> None:
        write_overlay(work, tiny_overlay(tiny_model, tracking={"enabled": False},  # MLflow: test_tracking.py
                                         generate={"batch_size": 6}))
        snakemake(work)

    return built_once(tmp_path_factory, "finished-run", run)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent from the paddleocr tier's venv
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (make test): the longest test files first (tests/xdist_schedule.py)."""
    if config.getvalue("dist") == "loadfile":
        return longest_first_scheduler(config, log)
    return None


MODEL_FIXTURES = {"tiny_model", "tiny_sdxl_model", "tiny_sd3_model"}


def pytest_collection_modifyitems(items):
    """Mark the tests that need a built tiny model (``-m "not model"``: the seconds-fast tests that
    the mutation run uses, see docs/development.md)."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


@pytest.fixture(autouse=True)
def _restore_torch_determinism():
    """``train.deterministic`` switches torch's deterministic algorithms on for the whole process (a job
    is one process); a test that trains in-process must not leave it on for the tests after it."""
    try:
        import torch
    except ImportError:  # the paddleocr tier's venv has no torch
        yield
        return

    enabled = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(enabled)
