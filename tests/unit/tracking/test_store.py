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


def test_a_new_store_is_a_copy_of_the_empty_store_this_mlflow_version_made_once(tmp_path, monkeypatch):
    """The first new SQLite store writes the template (MLflow's tables, migrated, and its Default experiment) to
    the user's cache; later ones copy it: each a store of its own, which the template never follows."""
    import sqlite3

    from mlflow.version import VERSION

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = tmp_path / f"cache/rewardloop/mlflow_store/mlflow-{VERSION}.db"
    first = store.client(f"sqlite:///{tmp_path}/a/mlflow.db")
    assert template.is_file() and not list(template.parent.glob(".*tmp"))
    first.create_experiment("only-in-a")
    second = store.client(f"sqlite:///{tmp_path}/b/mlflow.db")
    assert [e.name for e in second.search_experiments()] == ["Default"]
    assert second.get_experiment("0").artifact_location == "mlflow-artifacts:/0"  # no path of the template's

    def schema(db):
        with sqlite3.connect(str(db)) as conn:
            return (conn.execute("SELECT version_num FROM alembic_version").fetchall(),
                    sorted(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()))

    assert schema(tmp_path / "b/mlflow.db") == schema(tmp_path / "a/mlflow.db") == schema(template)
    second.create_experiment("only-in-b")
    with sqlite3.connect(str(template)) as conn:
        assert conn.execute("SELECT name FROM experiments").fetchall() == [("Default",)]
    # An unwritable cache: the store is made in place, as before the template.
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/no-cache-here")
    third = store.client(f"sqlite:///{tmp_path}/c/mlflow.db")
    assert [e.name for e in third.search_experiments()] == ["Default"]
