"""Security: no pickle runs, secrets stay in the environment, no eval/exec, writes stay in results/.

- A checkpoint whose unpickling would run code is refused by the real `rewardloop score` command for
  each reward that reads a torch checkpoint, and the payload never runs.
- A real tracked run with planted HF_TOKEN / MLflow credentials leaves them in no file of the work
  folder (artifacts, logs, .snakemake, the MLflow database and artifacts) and in no output.
- No eval/exec and no unsafe deserialisation anywhere in the workflow's code (an AST/token scan).
- Every output of the DAG lies in results/ (or the tiny model's folder inside the working directory);
  config values and prompt ids that would point elsewhere stop the run before any job.
"""

from __future__ import annotations

import ast
import json
import io
import pathlib
import secrets
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import yaml

from workflow_helpers import ROOT, SNAKEMAKE, file_digests, snakemake, tiny_overlay, write_overlay

REWARDLOOP = str(Path(sys.executable).with_name("rewardloop"))


class Payload:
    """Unpickling this creates ``marker`` (what a malicious checkpoint would do, harmlessly)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


@pytest.mark.parametrize("reward, option, extra", [
    ("aesthetic", "mlp_path", ["aesthetic.clip_path={clip}"]),
    ("hpsv2", "checkpoint_path", []),
], ids=["aesthetic.mlp_path", "hpsv2.checkpoint_path"])
def test_malicious_pickle_checkpoint_is_refused(tmp_path, reward, option, extra):
    import torch
    from PIL import Image

    evil, marker = tmp_path / "evil.pt", tmp_path / "pwned"
    torch.save(Payload(marker), evil)
    (tmp_path / "clip").mkdir()
    (tmp_path / "images").mkdir()
    Image.new("RGB", (16, 16), "red").save(tmp_path / "images/a.png")
    options = [f"{reward}.{option}={evil}", *(e.format(clip=tmp_path / "clip") for e in extra)]
    cmd = [REWARDLOOP, "score", "--reward", reward, "--images", str(tmp_path / "images"),
           "--out", str(tmp_path / "scores.parquet"), *(a for o in options for a in ("--reward-option", o))]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert f"'rewards.{reward}.{option}': {evil} refused or unreadable by torch.load(weights_only=True)" in result.stderr
    assert not marker.exists() and not (tmp_path / "scores.parquet").exists()
    # the payload is live: a plain unpickling runs it
    torch.load(evil, weights_only=False)
    assert marker.exists()


# --- planted secrets ---------------------------------------------------------------------------------


def test_planted_secrets_end_up_in_no_file_and_no_output(tmp_path, tiny_model):
    """A real run with MLflow tracking (the default SQLite store); the secrets are only in its environment."""
    planted = {"HF_TOKEN": f"hf_{secrets.token_hex(16)}", "MLFLOW_TRACKING_USERNAME": f"user{secrets.token_hex(8)}",
               "MLFLOW_TRACKING_PASSWORD": secrets.token_hex(20)}
    work = tmp_path / "work"
    (work / "prompts").mkdir(parents=True)
    (work / "prompts/train.txt").write_text("a red circle on a blue background\na red square on a green background\n")
    (work / "prompts/eval.txt").write_text("a red triangle on a yellow background\n")
    write_overlay(work, tiny_overlay(
        tiny_model, iterations=1, prompts={"train": "prompts/train.txt", "eval": "prompts/eval.txt"},
        generate={"prompts_per_iteration": 2, "images_per_prompt": 2, "steps": 2},
        train={"steps": 1, "batch_size": 1, "checkpointing_steps": 1}, eval={"steps": 2}, resources={"threads": 1},
    ))
    model_before = file_digests(tiny_model)
    outside_before = sorted(p.name for p in tmp_path.iterdir())
    result = snakemake(work, env={**planted, "MLFLOW_DISABLE_TELEMETRY": "true"})
    assert json.loads((work / "results/tracking/run.json").read_text())["status"] == "ok"
    files = [p for p in work.rglob("*") if p.is_file()]
    assert any(p.name == "mlflow.db" for p in files) and any(p.suffix == ".parquet" for p in files)
    for name, value in planted.items():
        assert value not in result.stdout + result.stderr, name
        found = [str(p.relative_to(work)) for p in files if value.encode() in p.read_bytes()]
        assert not found, f"{name} written to {found}"
    # and the run wrote only under results/ (and Snakemake's own .snakemake/)
    assert {p.relative_to(work).parts[0] for p in files} == {"results", ".snakemake", "prompts", "test.yaml"}
    assert sorted(p.name for p in tmp_path.iterdir()) == outside_before
    assert file_digests(tiny_model) == model_before


# --- no eval/exec, no unsafe deserialisation -----------------------------------------------------------

CODE = sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "scripts").glob("*.py")])
WORKFLOW = sorted([ROOT / "Snakefile", *(ROOT / "rules").glob("*.smk")])
UNSAFE = {("pickle", "load"), ("pickle", "loads"), ("pd", "read_pickle"), ("pandas", "read_pickle"),
          ("yaml", "load"), ("yaml", "unsafe_load"), ("dill", "load"), ("cloudpickle", "load"), ("joblib", "load")}


def unsafe_calls(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, keywords = node.func, {k.arg: k.value for k in node.keywords}
        if isinstance(func, ast.Name) and func.id in ("eval", "exec", "compile", "__import__"):
            if func.id != "__import__" or not isinstance(node.args[0], ast.Constant):
                found.append(f"{func.id}() line {node.lineno}")
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            call = (func.value.id, func.attr)
            weights_only = keywords.get("weights_only")
            if call == ("torch", "load") and not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                found.append(f"torch.load without weights_only=True line {node.lineno}")
            allow_pickle = keywords.get("allow_pickle")
            if call in (("np", "load"), ("numpy", "load")) and not (allow_pickle is None or (
                    isinstance(allow_pickle, ast.Constant) and allow_pickle.value is False)):
                found.append(f"np.load(allow_pickle=...) line {node.lineno}")
            if call in UNSAFE:
                found.append(f"{'.'.join(call)}() line {node.lineno}")
    return found


def test_unsafe_calls_are_detected():
    """The scan itself: each forbidden form is found, the safe ones are not."""
    bad = ("eval(cfg)\nexec(code)\npickle.load(fh)\ntorch.load(p)\ntorch.load(p, weights_only=False)\n"
           "yaml.load(text)\nnp.load(p, allow_pickle=True)\n__import__(name)\n")
    good = "model.eval()\ntorch.load(p, weights_only=True)\nyaml.safe_load(t)\nnp.load(p)\n__import__('argparse')\n"
    assert len(unsafe_calls(ast.parse(bad))) == 8
    assert unsafe_calls(ast.parse(good)) == []


@pytest.mark.parametrize("path", CODE, ids=[str(p.relative_to(ROOT)) for p in CODE])
def test_no_eval_exec_or_unsafe_deserialisation_in_code(path):
    assert unsafe_calls(ast.parse(path.read_text(), str(path))) == []


@pytest.mark.parametrize("path", WORKFLOW, ids=[str(p.relative_to(ROOT)) for p in WORKFLOW])
def test_no_eval_exec_or_unsafe_deserialisation_in_workflow(path):
    """Snakefile and rules are Snakemake syntax (not parseable by ast): scan their Python tokens for a call
    of eval/exec/compile or a pickle/torch/yaml load that is not an attribute of another object."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
              if t.type in (tokenize.NAME, tokenize.OP)]
    for before, name, after in zip(tokens, tokens[1:], tokens[2:]):
        if after.string == "(" and before.string != "." and name.string in ("eval", "exec", "compile"):
            pytest.fail(f"{path.name}:{name.start[0]}: {name.string}()")
    assert not {t.string for t in tokens} & {"pickle", "dill", "cloudpickle", "joblib"}
    assert "torch.load" not in path.read_text() and "yaml.load(" not in path.read_text()


# --- writes confined to results/ ---------------------------------------------------------------------


def test_every_output_of_the_dag_lies_in_results(tmp_path):
    """The default config (tiny model built by a rule, tracking on), sharded: `snakemake --summary` lists
    every output; all are under results/ but the tiny model, which is built inside the working directory."""
    overlay = {"prompts": {key: str(ROOT / f"resources/prompts/{key}.txt") for key in ("train", "eval")},
               "generate": {"shards": 2, "batch_size": 32}, "score": {"shards": 2}}
    write_overlay(tmp_path, overlay)
    result = snakemake(tmp_path, "--summary")
    outputs = [line.split("\t")[0] for line in result.stdout.splitlines()[1:] if line.strip()]
    assert len(outputs) > 60 and "results/iter_002/shards/score_01/scores.parquet" in outputs
    assert [o for o in outputs if not o.startswith("results/")] == ["resources/models/tiny-sd15"]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("config, prompts, message", [
    ({"model": {"path": "../escaped-model", "build_tiny": True}}, None,
     "model.path: ../escaped-model is outside the working directory"),
    ({"model": {"path": "{outside}/escaped-model", "build_tiny": True}}, None,
     "/escaped-model is outside the working directory"),
    ({"prompts": {"train": "prompts.jsonl"}}, '{"id": "../../escaped", "prompt": "a red circle"}\n',
     "prompts.train (prompts.jsonl): line 1: prompt id '../../escaped' contains a path separator"),
    ({"prompts": {"eval": "prompts.jsonl"}}, '{"id": "..\\\\escaped", "prompt": "a red circle"}\n',
     "prompts.eval (prompts.jsonl): line 1: prompt id '..\\\\escaped' contains a path separator"),
], ids=["build_tiny path with ..", "build_tiny absolute path outside", "prompt id with ../", "prompt id with ..\\"])
def test_config_cannot_point_a_write_outside_the_working_directory(tmp_path, tiny_model, config, prompts, message):
    work = tmp_path / "work"
    work.mkdir()
    config = yaml.safe_load(yaml.safe_dump(config).replace("{outside}", str(tmp_path)))
    write_overlay(work, tiny_overlay(tiny_model, **config))
    if prompts:
        (work / "prompts.jsonl").write_text(prompts)
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile", str(work / "test.yaml"),
           "--cores", "1"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode != 0 and message in result.stdout + result.stderr, result.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert not (work / "results").exists()
