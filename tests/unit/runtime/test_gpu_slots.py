"""Local GPU jobs get devices of their own: real flock-ed lock files, real processes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rewardloop.runtime import gpu_slots

DEVICES = ["0", "1", "2"]


def test_jobs_take_distinct_free_devices(tmp_path):
    first, first_locks = gpu_slots.claim(1, DEVICES, tmp_path)
    second, second_locks = gpu_slots.claim(2, DEVICES, tmp_path)
    assert first == ["0"] and second == ["1", "2"]
    with pytest.raises(gpu_slots.GpuSlotError, match="needs 1 GPU\\(s\\) but only 0 of"):
        gpu_slots.claim(1, DEVICES, tmp_path)
    with pytest.raises(gpu_slots.GpuSlotError, match="needs 4 GPU\\(s\\) but this machine has 3"):
        gpu_slots.claim(4, DEVICES, tmp_path, wait_s=60)
    for handle in first_locks:
        handle.close()  # the job ended: its device is free again
    again, _ = gpu_slots.claim(1, DEVICES, tmp_path)
    assert again == ["0"]


def test_another_process_holding_a_device_is_respected_until_it_exits(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from rewardloop.runtime import gpu_slots; "
         f"ids, locks = gpu_slots.claim(2, {DEVICES!r}, {str(tmp_path)!r}); print(','.join(ids), flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "0,1"
        taken, locks = gpu_slots.claim(1, DEVICES, tmp_path)
        assert taken == ["2"]
        for handle in locks:
            handle.close()
    finally:
        holder.communicate("")  # the holder exits; the kernel drops its locks
    assert gpu_slots.claim(3, DEVICES, tmp_path)[0] == DEVICES


def test_a_job_waits_for_a_device_until_its_holder_exits(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import time; from rewardloop.runtime import gpu_slots; "
         f"ids, locks = gpu_slots.claim(1, ['0'], {str(tmp_path)!r}); print('held', flush=True); time.sleep(1.5)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        taken, _ = gpu_slots.claim(1, ["0"], tmp_path, wait_s=30, poll_s=0.1)
        assert taken == ["0"] and time.monotonic() - started > 0.5  # it waited rather than share
    finally:
        holder.wait()


def test_assign_sets_cuda_visible_devices_and_skips_slurm(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_slots, "LOCK_DIR", tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    locks = gpu_slots.assign(1)
    assert len(locks) == 1 and gpu_slots.os.environ["CUDA_VISIBLE_DEVICES"] == "4"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert gpu_slots.assign(1) == [] and gpu_slots.os.environ["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert gpu_slots.assign(0) == []


def test_a_job_that_uses_no_gpu_claims_none_whatever_its_resources_say(tmp_path, monkeypatch):
    """The gathers of sharded stages share their rule's name, and so a SLURM profile's GPU request,
    with the sharded stage; on a submitting host without GPUs they must still run."""
    from types import SimpleNamespace

    from rewardloop.runtime.snakemake_job import job

    monkeypatch.setattr(gpu_slots, "LOCK_DIR", tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a host without GPUs
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    gather = SimpleNamespace(log=[str(tmp_path / "gather.log")], resources=SimpleNamespace(gpu=1), rule="generate")
    with pytest.raises(SystemExit):
        with job(gather):
            pass
    assert "GpuSlotError" in (tmp_path / "gather.log").read_text()
    with job(gather, uses_gpu=False):
        ran = True
    assert ran
