"""rewardloop.cli.rescore: `rewardloop rescore` finds the run folders under RESULTS and gives every base/ and
iter_XXX/ folder with an eval.parquet its rescore/<name>.parquet and .json, keeping existing ones unless forced."""

from __future__ import annotations

import json

import pytest

from rewardloop.cli import rescore
from rewardloop.artifacts import read_table

from image_tables import image_frame, write_images

GOLD = {"jpeg_incompressibility": {"weight": 1.0}}


def run_folder(root, iterations=(0, 1)):
    """A finished run's base/ and iter_XXX/ folders: eval images everywhere, rollouts in the iterations."""
    (root / "base").mkdir(parents=True)
    write_images(image_frame(["red", "white"]), root / "base/eval.parquet", iteration=None)
    for it in iterations:
        folder = root / f"iter_{it:03d}"
        folder.mkdir()
        write_images(image_frame(["blue"], iteration=it), folder / "eval.parquet", iteration=it)
        write_images(image_frame(["lime", "grey"], iteration=it), folder / "samples.parquet", iteration=it)
    return root


def test_run_folders_are_those_holding_iteration_folders_and_a_fan_outs_shared_base_is_none(tmp_path):
    results = tmp_path / "results"
    run_folder(results / "exp_a/seed_0")
    run_folder(results / "exp_a/seed_1", iterations=(0,))
    (results / "base").mkdir()
    write_images(image_frame(["red"]), results / "base/eval.parquet", iteration=None)
    assert rescore.run_folders(results) == [results / "exp_a/seed_0", results / "exp_a/seed_1"]
    with pytest.raises(ValueError, match=r"nothing: not a folder"):
        rescore.run_folders(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty: no iter_XXX/ folder with an eval\.parquet at or below it"):
        rescore.run_folders(tmp_path / "empty")


def test_every_folder_is_rescored_once_and_force_rescores(tmp_path, capsys):
    run = run_folder(tmp_path / "run")
    written = rescore.rescore_run(run, GOLD, batch_size=4, force=False)
    assert written == [run / f"{name}/rescore/jpeg_incompressibility.json" for name in ("base", "iter_000", "iter_001")]
    sources = read_table(run / "iter_001/rescore/jpeg_incompressibility.parquet").to_pandas().source
    assert sources.tolist() == ["rollout"] * 4 + ["eval"] * 2
    base = json.loads((run / "base/rescore/jpeg_incompressibility.json").read_text())
    assert base["iteration"] == -1 and "gold/jpeg_incompressibility/mean" in base
    assert "gold/jpeg_incompressibility/mean" in capsys.readouterr().out
    assert rescore.rescore_run(run, GOLD, batch_size=4, force=False) == []
    assert capsys.readouterr().out.count("kept (--force rescores it)") == 3
    assert len(rescore.rescore_run(run, GOLD, batch_size=4, force=True)) == 3
