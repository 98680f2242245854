import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from rewardloop.artifacts import (
    PROVENANCE_KEY,
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


def test_artifacts_get_the_umask_permissions_not_owner_only(tmp_path):
    import os
    import stat

    from rewardloop.artifacts import atomic_dir, write_table

    old = os.umask(0o022)
    try:
        write_table(pd.DataFrame({"x": [1]}), tmp_path / "t.parquet")
        with atomic_dir(tmp_path / "folder") as tmp:
            (tmp / "inside.txt").write_text("x")
        with atomic_dir(tmp_path / "folder") as tmp:  # replaces the finished folder as a whole
            (tmp / "again.txt").write_text("y")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "t.parquet").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == 0o755
    assert sorted(p.name for p in (tmp_path / "folder").iterdir()) == ["again.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_atomic_dir_keeps_the_finished_folder_when_the_block_fails(tmp_path):
    from rewardloop.artifacts import atomic_dir

    with atomic_dir(tmp_path / "folder") as tmp:
        (tmp / "good.txt").write_text("x")
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "folder") as tmp:
            (tmp / "half.txt").write_text("y")
            raise RuntimeError("killed mid-write")
    assert [p.name for p in (tmp_path / "folder").iterdir()] == ["good.txt"]
    assert len(list(tmp_path.iterdir())) == 1


def test_safetensors_bytes_do_not_depend_on_the_process(tmp_path):
    """safetensors orders its metadata by a per-process random hash: the same tensors written by
    three processes must still have one sha256 (a resumed run is compared with an uninterrupted one)."""
    import hashlib
    import subprocess
    import sys

    script = (
        "import sys, torch\n"
        "from rewardloop.artifacts import write_tensors\n"
        "meta = {k: k * 3 for k in ('model', 'iteration', 'config_hash', 'version', 'seed', 'stage')}\n"
        "write_tensors({'b': torch.arange(6.0), 'a': torch.ones(2, 2)}, sys.argv[1], meta=meta)\n"
    )
    digests = set()
    for run in range(3):
        path = tmp_path / f"run{run}.safetensors"
        subprocess.run([sys.executable, "-c", script, str(path)], check=True)
        digests.add(hashlib.sha256(path.read_bytes()).hexdigest())
        assert torch.equal(read_tensors(path)["a"], torch.ones(2, 2))
    assert len(digests) == 1


def test_datasets_decodes_image_columns_with_no_cast(tmp_path):
    """🤗 datasets reads the table's `huggingface` features: the image column is its Image feature
    (PIL on access) and the other columns keep their types; a table without images carries none."""
    import pyarrow as pa
    from datasets import Image, load_dataset
    from PIL import Image as PILImage

    from rewardloop.artifacts import DATASETS_KEY, IMAGE_TYPE, encode_png

    red = PILImage.new("RGB", (8, 6), (255, 0, 0))
    table = pa.table({"sample_id": ["a", "b"], "iteration": [2, 2],
                      "image": pa.array([encode_png(red, "a.png"), encode_png(red, "b.png")], type=IMAGE_TYPE)})
    write_table(table, tmp_path / "samples.parquet")
    write_table(pd.DataFrame({"sample_id": ["a"], "reward": [1.0]}), tmp_path / "scores.parquet")
    dataset = load_dataset("parquet", data_files=str(tmp_path / "samples.parquet"), split="train",
                           cache_dir=str(tmp_path / "cache"))
    assert isinstance(dataset.features["image"], Image)
    assert dataset.features["iteration"].dtype == "int64"
    row = dataset[1]
    assert isinstance(row["image"], PILImage.Image) and row["image"].size == (8, 6)
    assert row["image"].getpixel((0, 0)) == (255, 0, 0) and row["sample_id"] == "b"
    assert read_provenance(tmp_path / "samples.parquet") == {}  # the provenance key is still there
    import pyarrow.parquet as pq

    assert DATASETS_KEY not in (pq.read_schema(tmp_path / "scores.parquet").metadata or {})


# --- tables that vouch for themselves: the record of rows a writer leaves, checked by every read -------------

SAMPLES = pd.DataFrame({"sample_id": ["s0", "s1", "s2", "s3"], "reward": [0.1, 0.2, 0.3, 0.4]})


def _rewrite(path, edit) -> None:
    """Edit a table in place the way a user's pandas/pyarrow would, keeping its schema metadata."""
    table = pq.read_table(path)
    pq.write_table(edit(table).replace_schema_metadata(table.schema.metadata), path)


@pytest.mark.parametrize("edit, differs", [
    (lambda t: t.filter(pa.array([True, False, True, True])),
     "3 rows but generate recorded 4 (sample_id s1 missing)"),
    (lambda t: t.take([1, 0, 2, 3]),
     "rows differ from what generate recorded (reordered: row 0 is sample_id s1, generate wrote s0 there)"),
    (lambda t: pa.concat_tables([t, t.slice(0, 1)]),
     "5 rows but generate recorded 4 (sample_id s0 not recorded)"),
    (lambda t: t.set_column(0, "sample_id", pa.array(["s0", "s1", "s2", "x9"])),
     "rows differ from what generate recorded (sample_id s3 missing; sample_id x9 not recorded)"),
], ids=["row dropped", "rows reordered", "row repeated", "id changed"])
def test_a_table_changed_after_its_stage_wrote_it_is_refused_naming_what_differs(tmp_path, edit, differs):
    path = tmp_path / "samples.parquet"
    write_table(SAMPLES, path, writer="generate")
    _rewrite(path, edit)
    with pytest.raises(ArtifactError) as err:
        read_table(path, required=["sample_id"])
    assert str(err.value) == (f"{path}: {differs}: the file was changed after generate wrote it; "
                              "delete it to redo generate")


def test_pairs_are_identified_by_chosen_and_rejected_and_many_ids_are_counted(tmp_path):
    path = tmp_path / "pairs.parquet"
    pairs = pd.DataFrame({"prompt_id": ["p"] * 5, "chosen": [f"c{i}" for i in range(5)],
                          "rejected": [f"r{i}" for i in range(5)]})
    write_table(pairs, path, writer="pairs")
    _rewrite(path, lambda t: t.slice(0, 1))
    with pytest.raises(ArtifactError, match=r"1 rows but pairs recorded 5 \(chosen\+rejected c1/r1, c2/r2, c3/r3 "
                                            r"and 1 more missing\)"):
        read_table(path)


def test_a_table_read_in_part_is_still_checked_and_a_table_without_a_record_is_read_as_before(tmp_path):
    path = tmp_path / "samples.parquet"
    write_table(SAMPLES, path, writer="generate")
    assert read_table(path, columns=["reward"]).column_names == ["reward"]  # only what was asked
    _rewrite(path, lambda t: t.slice(1))
    with pytest.raises(ArtifactError, match="3 rows but generate recorded 4 .sample_id s0 missing"):
        read_table(path, columns=["reward"])
    with pytest.raises(ArtifactError, match="missing column.s. prompt; has sample_id, reward"):
        read_table(path, columns=["prompt"])
    # written before records: write_table then left its provenance alone, which vouches for the file
    old = pa.Table.from_pandas(SAMPLES.iloc[1:], preserve_index=False)
    pq.write_table(old.replace_schema_metadata({PROVENANCE_KEY: b'{"iteration": 0}'}), path)
    assert read_table(path).num_rows == 3


def test_a_stage_table_written_by_another_program_is_refused_and_a_users_table_is_read(tmp_path):
    """The same rows, other sample ids, no record and no provenance (pandas' to_parquet): what replacing
    samples.parquet by hand gives. A stage refuses it at once, naming the file; a user's input is read."""
    path = tmp_path / "samples.parquet"
    SAMPLES.assign(sample_id=[f"x{i}" for i in range(len(SAMPLES))]).to_parquet(path)
    with pytest.raises(ArtifactError, match=r"samples.parquet: carries neither the record of its rows \(rewardloop_rows\) "
                                            r"nor rewardloop's provenance: not a table a stage of this workflow wrote"):
        read_table(path)
    assert read_table(path, vouched=False).num_rows == len(SAMPLES)


def test_a_table_rewritten_by_write_table_gets_a_new_record(tmp_path):
    path = tmp_path / "scores.parquet"
    write_table(SAMPLES, path, writer="score")
    write_table(read_table(path).slice(1), path, writer="score")  # what gather does with shards
    assert read_table(path).num_rows == 3


def test_a_tensor_file_changed_after_its_stage_wrote_it_is_refused_naming_the_key(tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    path = tmp_path / "latents.safetensors"
    write_tensors({f"latents/s{i}": torch.zeros(2) for i in range(3)}, path, meta={"iteration": 0},
                  writer="generate")
    assert sorted(read_tensors(path)) == ["latents/s0", "latents/s1", "latents/s2"]
    with safe_open(str(path), framework="np") as fh:
        metadata = fh.metadata()
    tensors = load_file(str(path))
    del tensors["latents/s1"]
    save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(ArtifactError) as err:
        read_tensors(path, numpy=True)
    assert str(err.value) == (f"{path}: 2 tensors but generate recorded 3 (tensor latents/s1 missing): the file was "
                              "changed after generate wrote it; delete it to redo generate")
    save_file(tensors, str(path))  # no record (written before records, or by another tool): read as before
    assert len(read_tensors(path)) == 2
