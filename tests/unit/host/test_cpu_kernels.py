"""The CPU kernel pin (src/rewardloop/host/cpu_kernels.py, bench/kernel_probe.py): real short tiny-model builds in processes
with different variables, compared by the bytes of their weights."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rewardloop.host import cpu_kernels

PROBE = Path(__file__).resolve().parents[3] / "bench" / "kernel_probe.py"  # builds, trains, prints the digests
STEPS = ["--vae-steps", "10", "--unet-steps", "20", "--threads", "1"]  # ~15 s a build on one core, then an iteration


def build(out, env: dict) -> dict:
    result = subprocess.run([sys.executable, str(PROBE), str(out), *STEPS],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.skipif(not cpu_kernels.has_avx2(), reason="the pin applies to x86-64 CPUs with AVX2")
def test_pinned_builds_and_training_are_byte_identical_to_an_avx2_only_cpus_and_unpinned_ones_are_not_where_the_cpu_has_more(
        tmp_path):
    pinned = build(tmp_path / "pinned", cpu_kernels.probe_environment(pinned=True))
    avx2_cpu = build(tmp_path / "avx2_cpu", cpu_kernels.probe_environment(pinned=True, avx2_only_cpu=True))
    assert pinned["capability"] == avx2_cpu["capability"] == "AVX2"
    assert pinned["variables"] == cpu_kernels.PINNED
    assert len(pinned["sha256"]) == 5  # the VAE, the text encoder, the UNet, the rollouts' latents and the LoRA
    assert pinned["sha256"] == avx2_cpu["sha256"]
    # Where this CPU dispatches to more than AVX2 (AVX-512 on a Xeon), the pin is what makes its bytes an AVX2
    # CPU's: unpinned, they differ. (On an AVX2-only CPU the unpinned build is the pinned one: not built.)
    native_level = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                                  env=cpu_kernels.probe_environment(pinned=False), capture_output=True, text=True,
                                  check=True).stdout.strip()
    if native_level != "AVX2":
        native = build(tmp_path / "native", cpu_kernels.probe_environment(pinned=False))
        assert native["capability"] == native_level and native["sha256"] != pinned["sha256"]
        print(f"native {native_level}: files that differ unpinned: "
              f"{sorted(k for k in native['sha256'] if native['sha256'][k] != pinned['sha256'][k])}")


QEMU = shutil.which("qemu-x86_64")
# A CPU of the other vendor as qemu's user-mode emulator presents it to the libraries (its vendor, its cache
# sizes, AVX2 without AVX-512): an Intel host emulates an AMD EPYC, an AMD host an Intel Haswell.
OTHER_VENDOR = {"GenuineIntel": "EPYC-Rome-v2", "AuthenticAMD": "Haswell-v4"}


def cpu_vendor() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:  # not Linux
        return ""
    return next((line.partition(":")[2].strip() for line in lines if line.startswith("vendor_id")), "")


def gradients(env: dict, emulated: str | None = None) -> dict:
    prefix = [QEMU, "-cpu", emulated] if emulated else []
    result = subprocess.run([*prefix, sys.executable, str(PROBE), "--gradients",
                             "--threads", "2"], env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.skipif(QEMU is None or not cpu_kernels.has_avx2() or cpu_vendor() not in OTHER_VENDOR,
                    reason="needs qemu-user's qemu-x86_64 (CI installs it, .ci/run) on an Intel or AMD x86-64 CPU")
def test_pinned_kernels_compute_the_same_gradients_on_an_emulated_cpu_of_the_other_vendor():
    # 346 s measured on 2 cores, mostly the two emulated runs: the gradient probe natively and under qemu,
    # pinned and with the first pin's MKL branch.
    emulated = OTHER_VENDOR[cpu_vendor()]
    pinned = cpu_kernels.probe_environment(pinned=True)
    here, there = gradients(pinned), gradients(pinned, emulated)
    assert there["capability"] == "AVX2"
    assert here["sha256"] == there["sha256"]
    # MKL's AVX2 branch (the first pin) holds on Intel CPUs only; elsewhere MKL takes its AUTO branch: the
    # emulated CPU shows that difference, as a real AMD EPYC and an Intel Xeon did (another tiny model).
    intel_branch = {**pinned, "MKL_CBWR": "AVX2"}
    assert gradients(intel_branch)["sha256"] != gradients(intel_branch, emulated)["sha256"]


def test_pin_sets_what_is_unset_and_keeps_and_names_what_the_user_set():
    env = {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "avx2"}
    lines = cpu_kernels.pin("auto", "cpu", env)
    assert env == {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    if cpu_kernels.has_avx2():
        assert len(lines) == 2 and "ATEN_CPU_CAPABILITY=avx512 from the environment is kept" in lines[0]
        assert "MKL_CBWR=avx2 from the environment is kept (cpu_kernels auto would set COMPATIBLE)" in lines[1]


@pytest.mark.parametrize(("setting", "device", "expected"), [
    ("auto", "cpu", "avx2"), ("auto", "auto", "avx2"), ("auto", "cuda:1", "native"), ("auto", "mps", "native"),
    ("avx2", "cuda", "avx2"), ("native", "cpu", "native")])
def test_level_follows_the_setting_and_auto_the_device(setting, device, expected):
    assert cpu_kernels.level(setting, device) == expected


def test_native_sets_nothing_and_an_unknown_setting_is_refused_naming_the_values():
    env = {}
    assert cpu_kernels.pin("native", "cpu", env) == [] and env == {}
    with pytest.raises(ValueError, match="'avx512' is not one of auto, avx2, native"):
        cpu_kernels.pin("avx512", "cpu", env)
