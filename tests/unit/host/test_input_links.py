"""rewardloop.host.input_links and the stage config that uses it: jobs read inputs by content identity."""

from __future__ import annotations

import os

import pytest

from rewardloop.host import input_links


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A process that has named no link yet, working in tmp_path."""
    monkeypatch.setattr(input_links, "_named", {})
    monkeypatch.setattr(input_links, "_mode", "place")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_links_named_while_planning_are_placed_only_at_onstart(fresh):
    (fresh / "model").mkdir()
    input_links.use(defer=True)  # the Snakefile's main process
    link = input_links.link_for("results", "ab12", "model")
    assert link == "results/.inputs/ab12"
    assert not os.path.lexists(link)  # a dry run writes nothing under results/
    input_links.place_all()
    assert os.readlink(link) == str(fresh / "model")
    (fresh / "other").mkdir()
    later = input_links.link_for("results", "cd34", "other")  # params evaluated after onstart: placed at once
    assert os.readlink(later) == str(fresh / "other")


def test_a_link_follows_the_content_to_its_new_place(fresh):
    link = input_links.link_for("results", "ab12", "model")
    input_links.link_for("results", "ab12", "moved/model")
    assert os.readlink(link) == str(fresh / "moved/model")
    assert sorted(os.listdir(fresh / "results/.inputs")) == ["ab12"]  # no temp left beside it


def test_a_copy_where_a_link_was_is_replaced_by_the_link(fresh):
    """A run folder copied by a tool that follows links (shutil.copytree, cp -rL) holds the input's files."""
    (fresh / "results/.inputs/ab12/unet").mkdir(parents=True)
    (fresh / "results/.inputs/cd34").parent.mkdir(exist_ok=True)
    (fresh / "results/.inputs/cd34").write_text("a copied checkpoint")
    input_links.place_all()
    for identity in ("ab12", "cd34"):
        link = input_links.link_for("results", identity, "model")
        assert os.readlink(link) == str(fresh / "model")


def test_provenance_names_where_a_link_points_and_its_identity(fresh):
    link = input_links.link_for("results", "ab12", "model")
    assert input_links.described(link) == f"{fresh / 'model'} (ab12)"
    assert input_links.described("org/name") == "org/name"
    assert input_links.described(None) == "None"  # tracking names a run whose config has no model path
    (fresh / "head.pth").write_bytes(b"")
    checkpoint = input_links.link_for("results", "cd34", "head.pth")  # a file keeps its suffix
    assert checkpoint == "results/.inputs/cd34.pth" and input_links.described(checkpoint) == f"{fresh / 'head.pth'} (cd34)"


def test_outside_a_workflow_run_paths_stay_as_given(fresh, monkeypatch):
    monkeypatch.setattr(input_links, "_mode", None)
    assert input_links.link_for("results", "ab12", "model") == "model"
    assert not (fresh / "results").exists()


def test_stage_config_holds_identities_not_paths(fresh, tiny_model):
    """The same model at two paths gives one stage config; the job's path is the link."""
    import shutil

    from rewardloop.runtime.job_config import stage_config

    copy = shutil.copytree(tiny_model, fresh / "copy")
    configs = [stage_config({"model": {"path": str(path), "build_tiny": False, "init_lora": None}, "device": "cpu"},
                            "model", "device") for path in (tiny_model, copy)]
    assert configs[0] == configs[1]
    assert configs[0]["model"]["path"] == f"results/.inputs/{configs[0]['inputs']['model.path']}"
    assert os.readlink(configs[0]["model"]["path"]) == str(copy)  # the last one named
