"""The `rewardloop` command as a user meets it: --version, help, a closed pipe, inspect on a folder."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

from rewardloop import __version__
from rewardloop.cli import main as cli
from rewardloop.artifacts import write_json, write_table

REWARDLOOP = str(Path(sys.executable).with_name("rewardloop"))


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([REWARDLOOP, *map(str, args)], capture_output=True, text=True, timeout=120, **kwargs)


def commands() -> dict[str, argparse.ArgumentParser]:
    top = cli.parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return {"": top, **sub.choices}


def test_version():
    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"rewardloop {__version__}", out


def test_every_option_has_help_and_shows_its_default():
    for name, command in commands().items():
        text = command.format_help()
        for action in command._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, (name, action.dest)
            if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS):
                assert f"(default: {action.default})" in " ".join(text.split()), (name, action.dest)
    assert "(default: 1200)" in commands()["build-tiny"].format_help()


def test_score_help_is_plain_text():
    out = run("score", "--help")
    assert out.returncode == 0 and "--reward NAME[=WEIGHT]" in out.stdout
    assert "``" not in out.stdout and "::" not in out.stdout, out.stdout  # no reStructuredText
    assert "(default: 8)" in out.stdout


def test_serve_reward_is_a_subcommand():
    out = run("serve-reward", "--help")
    assert out.returncode == 0 and "--reward NAME" in out.stdout and "127.0.0.1" in out.stdout, out


def test_closed_pipe_ends_quietly(tmp_path):
    """`rewardloop inspect ... | head -n 1`: no "Broken pipe", no traceback, the status of `cat` in the
    same place (141); output beyond the pipe's buffer, so that the write does meet the closed pipe."""
    write_table(pd.DataFrame({"sample_id": [f"s{i}" for i in range(50)], "reward": [0.5] * 50}),
                tmp_path / "scores.parquet")
    paths = " ".join([str(tmp_path / "scores.parquet")] * 400)
    out = subprocess.run(["bash", "-c", f"{REWARDLOOP} inspect {paths} | head -n 1; echo \"status ${{PIPESTATUS[0]}}\""],
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.splitlines() == [f"{tmp_path}/scores.parquet: Parquet, 50 rows", "status 141"], out
    assert out.stderr == "", out.stderr


def test_inspect_a_folder_recurses_into_its_subfolders(tmp_path):
    iteration = tmp_path / "iter_000"
    write_table(pd.DataFrame({"sample_id": ["a"], "reward": [1.0]}), iteration / "scores.parquet")
    write_json({"train/loss": 0.25}, iteration / "metrics/train.json")
    write_json({"rank": 4}, iteration / "checkpoint/adapter_info.json")
    (iteration / "logs").mkdir()
    (iteration / "logs/job.log").write_text("not an artifact")
    out = run("inspect", "-v", tmp_path)
    assert out.returncode == 0, out.stderr
    assert [line for line in out.stdout.splitlines() if line.startswith(str(tmp_path))] == [
        f"{iteration}/checkpoint/adapter_info.json", f"{iteration}/metrics/train.json",
        f"{iteration}/scores.parquet: Parquet, 1 rows"]
    assert '"train/loss": 0.25' in out.stdout
    (tmp_path / "empty").mkdir()
    assert run("inspect", tmp_path / "empty").stdout.strip() == f"{tmp_path / 'empty'}: no artifacts"


def test_inspect_lists_a_folder_briefly_one_line_per_artifact(tmp_path):
    """Without -v a folder is a listing: each artifact's path below it and its headline, nothing more."""
    write_table(pd.DataFrame({"sample_id": ["a", "b"], "reward": [1.0, 0.5]}), tmp_path / "iter_000/scores.parquet")
    write_json({"train/loss": 0.25, "train/steps": 3}, tmp_path / "iter_000/metrics/train.json")
    (tmp_path / "iter_000/metrics/broken.json").write_text("{")
    out = run("inspect", tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"{tmp_path}: 3 artifacts (details: rewardloop inspect -v)"
    assert lines[1].split()[:2] == ["iter_000/metrics/broken.json", "unreadable"]  # and the listing goes on
    assert [line.split() for line in lines[2:]] == [
        ["iter_000/metrics/train.json", "JSON,", "2", "keys"],
        ["iter_000/scores.parquet", "Parquet,", "2", "rows,", "2", "columns"]]
    assert "train/loss" not in out.stdout and all(len(line) <= 100 for line in lines[1:])
