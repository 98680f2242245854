"""The tracking store's client: one process opening the default (relative) SQLite store from two
run folders reaches each folder's own database."""

from __future__ import annotations

import os

from rewardloop.tracking import store


def test_a_relative_sqlite_uri_is_made_absolute_and_others_are_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert store.absolute_sqlite("sqlite:///results/mlflow.db") == f"sqlite:///{tmp_path}/results/mlflow.db"
    assert store.absolute_sqlite("sqlite:///r/m.db?timeout=5") == f"sqlite:///{tmp_path}/r/m.db?timeout=5"
    for kept in ("sqlite:////abs/m.db", "sqlite:///:memory:", "http://127.0.0.1:5000", "file:///x"):
        assert store.absolute_sqlite(kept) == kept


def test_the_default_store_opened_from_two_folders_in_one_process_is_each_folders_own(tmp_path, monkeypatch):
    """MLflow caches stores and their engines by URI string: without the absolute path the second
    folder's client reached the first folder's database (a benchmark of one run logged into another's)."""
    monkeypatch.delenv(store.ENV_TRACKING_URI, raising=False)
    for name in ("first", "second"):
        folder = tmp_path / name
        folder.mkdir()
        monkeypatch.chdir(folder)
        mlflow_client = store.client(store.tracking_uri())
        mlflow_client.create_experiment(f"in-{name}")
        assert (folder / "results/mlflow.db").is_file()
    for name in ("first", "second"):
        monkeypatch.chdir(tmp_path / name)
        names = {e.name for e in store.client(store.tracking_uri()).search_experiments()}
        other = "second" if name == "first" else "first"
        assert f"in-{name}" in names and f"in-{other}" not in names, (name, names)
    assert not os.path.exists(tmp_path / "results")
