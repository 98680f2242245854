"""rewardloop.models.weight_files and the device check: what the startup refuses before Snakemake can delete
finished outputs (the workflow cases are in tests/workflow/test_bad_inputs.py)."""

from __future__ import annotations

import io
import zipfile

import pytest
import torch
from safetensors.torch import save_file

from rewardloop.models.layout import LayoutError
from rewardloop.models.weight_files import check_files


@pytest.fixture
def folder(tmp_path):
    """A component folder: a config, a safetensors file of two tensors, a torch checkpoint."""
    (tmp_path / "config.json").write_text("{}")
    save_file({"a": torch.ones(64, 64), "b": torch.zeros(32)}, str(tmp_path / "model.safetensors"))
    torch.save({"w": torch.ones(16)}, tmp_path / "head.pt")
    return tmp_path


def test_complete_files_pass(folder):
    check_files(folder, "model.path")
    check_files(folder / "model.safetensors", "model.init_lora")


@pytest.mark.parametrize("keep", [0.99, 0.5, 0.001])
def test_a_cut_safetensors_file_is_named_with_its_declared_size(folder, keep):
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: max(1, int(len(data) * keep))])
    with pytest.raises(LayoutError, match=r"model\.path: .*model\.safetensors") as error:
        check_files(folder, "model.path")
    if keep > 0.01:  # the header is still whole: the declared size is said
        assert f"declares {len(data)} bytes, the file has {int(len(data) * keep)}" in str(error.value)


def test_bytes_appended_after_the_tensors_are_refused(folder):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes() + b"\0" * 10)
    with pytest.raises(LayoutError, match="bytes appended after the tensors"):
        check_files(folder, "model.path")


def test_a_header_that_is_not_json_is_refused(folder):
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8] = ord("#")
    weights.write_bytes(bytes(data))
    with pytest.raises(LayoutError, match="header is not valid JSON"):
        check_files(folder, "model.path")


def test_a_cut_torch_checkpoint_is_refused_and_a_zip_one_passes(folder):
    checkpoint = folder / "head.pt"
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[:-30])  # the zip's central directory is at the end
    with pytest.raises(LayoutError, match=r"rewards\.x\.path: .*head\.pt \(\d+ bytes\) is not a complete torch checkpoint"):
        check_files(checkpoint, "rewards.x.path")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", b"")
    checkpoint.write_bytes(buffer.getvalue())
    check_files(checkpoint, "rewards.x.path")


def test_a_dangling_link_is_named_with_its_target(folder):
    (folder / "vae").mkdir()
    (folder / "vae" / "weights.safetensors").symlink_to("../../blobs/deadbeef")
    with pytest.raises(LayoutError, match=r"vae/weights\.safetensors is a link to \.\./\.\./blobs/deadbeef, which does not exist"):
        check_files(folder, "model.path")


def test_links_are_followed_to_complete_files(folder, tmp_path_factory):
    """A hub snapshot: every file a link into blobs/."""
    snapshot = tmp_path_factory.mktemp("snapshot")
    (snapshot / "model.safetensors").symlink_to(folder / "model.safetensors")
    check_files(snapshot, "model.path")
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:100])
    with pytest.raises(LayoutError, match="cut short"):
        check_files(snapshot, "model.path")


def test_hidden_folders_are_not_read(folder):
    """A hub download's .cache/ holds partial files by design."""
    (folder / ".cache").mkdir()
    (folder / ".cache" / "model.safetensors.incomplete.safetensors").write_bytes(b"\1" * 20)
    check_files(folder, "model.path")


def test_check_input_files_reads_every_local_input_of_the_config(folder, tmp_path_factory):
    from rewardloop.config.checks import check_input_files

    lora = tmp_path_factory.mktemp("lora")
    save_file({"x": torch.ones(8)}, str(lora / "pytorch_lora_weights.safetensors"))
    config = {"model": {"path": str(folder), "build_tiny": False, "init_lora": str(lora)},
              "rewards": {}, "eval": {}, "gold_rewards": {}}
    check_input_files(config)
    weights = lora / "pytorch_lora_weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4])
    with pytest.raises(LayoutError, match=r"^model\.init_lora: .*pytorch_lora_weights\.safetensors is cut short"):
        check_input_files(config)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a host without a GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_cuda_device_on_a_host_without_one_is_named(device, monkeypatch):
    from rewardloop.models.files import ModelError
    from rewardloop.models.loading import check_device, resolve_device

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ModelError, match=rf"^device: {device}, but torch .* sees 0 CUDA device\(s\) \(CUDA_VISIBLE_DEVICES=\)"):
        check_device(device)
    with pytest.raises(ModelError, match=f"device: {device}"):
        resolve_device(device)  # what a stage calls on a cluster node
    check_device("cpu")
    check_device("auto")
    assert resolve_device("auto").type == "cpu"


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="checks the refusal on a host without MPS")
def test_mps_on_a_host_without_it_is_named():
    from rewardloop.models.files import ModelError
    from rewardloop.models.loading import check_device

    with pytest.raises(ModelError, match="device: mps, but this host has no MPS device"):
        check_device("mps")


def test_a_train_job_asking_for_more_gpus_than_its_host_has_is_named(monkeypatch):
    from rewardloop.models.files import ModelError
    from rewardloop.models.loading import check_gpu_count

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ModelError, match=r"^train.num_processes asks for 2 GPUs \(one process each\), but this host "
                                         r"has 0 CUDA device\(s\) \(CUDA_VISIBLE_DEVICES=\)"):
        check_gpu_count("cuda", 2, "train.num_processes")
    check_gpu_count("cpu", 4, "train.num_processes")  # gloo processes on the CPU need no GPU
    check_gpu_count("cuda", 1, "train.num_processes")  # one process: check_device's question
