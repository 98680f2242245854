import pandas as pd
import pytest
import torch

from rewardloop.artifacts import (
    ArtifactError,
    atomic_path,
    read_provenance,
    read_table,
    read_tensors,
    write_table,
    write_tensors,
)


def test_table_roundtrip_keeps_provenance(tmp_path):
    path = tmp_path / "t.parquet"
    write_table(pd.DataFrame({"a": [1, 2]}), path, meta={"iteration": 3, "config_hash": "abc"})
    assert read_table(path, required=["a"]).num_rows == 2
    assert read_provenance(path) == {"iteration": 3, "config_hash": "abc"}


def test_failed_write_leaves_no_file_and_no_temp(tmp_path):
    path = tmp_path / "out.parquet"
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_previous_version(tmp_path):
    path = tmp_path / "out.parquet"
    write_table(pd.DataFrame({"a": [1]}), path)
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert read_table(path).column("a").to_pylist() == [1]


def test_missing_columns_and_corrupt_files_are_named(tmp_path):
    path = tmp_path / "t.parquet"
    write_table(pd.DataFrame({"a": [1]}), path)
    with pytest.raises(ArtifactError, match=r"t.parquet: missing column\(s\) reward"):
        read_table(path, required=["a", "reward"])
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(path.read_bytes()[:20])
    with pytest.raises(ArtifactError, match="bad.parquet: not a readable Parquet file"):
        read_table(bad)


def test_tensors_roundtrip(tmp_path):
    path = tmp_path / "x.safetensors"
    write_tensors({"latents/a": torch.ones(2, 2)}, path, meta={"iteration": 1})
    assert torch.equal(read_tensors(path)["latents/a"], torch.ones(2, 2))
    with pytest.raises(ArtifactError, match="file not found"):
        read_tensors(tmp_path / "missing.safetensors")
