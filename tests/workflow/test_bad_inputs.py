"""Bad inputs: each stops the real `snakemake` run with a non-zero exit and a message that names the
cause (the config key, the file, the line or the sample), and changes no earlier artifact.

Every case starts from a copy of one finished tiny run (2 iterations, built once per module), so
"no earlier artifact changed" is checked against real artifacts: the sha256 and mtime of every file
under results/ before and after. Config, prompt, model and LoRA errors stop at parse time
(`rewardloop.config.validate` in the Snakefile), before any job: there nothing under results/ may
change. Damaged artifacts are met by the stage that reads them; Snakemake removes that job's own
outputs before running it (they are being redone), and when it fails the rerun protection
(runtime/previous_versions.py) links the finished versions back: every file must then be as it was
(not half written, not lost), apart from the attempt's own log and benchmark files, and the stage
must still be planned again (the restored files do not pass for the damaged input's).
The unreachable MLflow server is the one input that must *not* stop the run (last test here; the
tracking details are in tests/workflow/test_tracking.py::test_unreachable_server_fails_softly).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from workflow_helpers import (ROOT, SNAKEMAKE, file_digests, immutable_folder, planned_jobs, snakemake, tiny_overlay,
                              write_overlay)

pytestmark = pytest.mark.workflow

LORA = "pytorch_lora_weights.safetensors"
# What any job attempt writes whether or not it succeeds: the job's log and benchmark, the run lock.
ATTEMPT_RECORDS = ("logs/", "benchmarks/", ".rewardloop.lock")


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_model) -> Path:
    """A finished 2-iteration run with its own small prompt files (relative paths, so copies work)."""
    work = tmp_path_factory.mktemp("finished")
    (work / "prompts").mkdir()
    for key, count in (("train", 8), ("eval", 4)):
        lines = (ROOT / f"resources/prompts/{key}.txt").read_text().splitlines()[:count]
        (work / "prompts" / f"{key}.txt").write_text("\n".join(lines) + "\n")
    write_overlay(work, tiny_overlay(
        tiny_model, prompts={"train": "prompts/train.txt", "eval": "prompts/eval.txt"},
        generate={"prompts_per_iteration": 4, "images_per_prompt": 2, "steps": 2},
        train={"steps": 2, "batch_size": 2, "checkpointing_steps": 1}, eval={"steps": 2},
        tracking={"enabled": False}, resources={"threads": 1},
    ))
    snakemake(work)
    return work


@pytest.fixture
def run(finished, tmp_path) -> Path:
    """A private copy of the finished run (copy2 keeps every mtime; links stay links, as cp -a keeps them)."""
    return Path(shutil.copytree(finished, tmp_path / "run", symlinks=True, copy_function=shutil.copy2))


def snapshot(work: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[str, int]]:
    """{path under results/: (sha256, mtime_ns)} of every file, but those starting with ``skip``."""
    return file_digests(work / "results", skip)


def snakemake_fails(work: Path, *args: str, configfiles: tuple[str, ...] = (), env: dict | None = None) -> str:
    """Run the workflow in ``work``; assert a non-zero exit; return stdout + stderr."""
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile",
           str(work / "test.yaml"), *(str(work / f) for f in configfiles), "--cores", "1", *args]
    result = subprocess.run(cmd, capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    return output


# --- files the cases put into the run folder ---------------------------------------------------------


def write(rel: str, content: str | bytes) -> Callable:
    def make(work: Path, tiny_model: Path) -> None:
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return make


def jsonl(*rows: dict) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def sdxl_layout(work: Path, tiny_model: Path) -> None:
    """A diffusers folder laid out as an SDXL pipeline (second text encoder, SDXL class name)."""
    folder = work / "models/sdxl"
    shutil.copytree(tiny_model, folder)
    index = json.loads((folder / "model_index.json").read_text())
    index.update(_class_name="StableDiffusionXLPipeline", text_encoder_2=["transformers", "CLIPTextModelWithProjection"],
                 tokenizer_2=["transformers", "CLIPTokenizer"])
    (folder / "model_index.json").write_text(json.dumps(index))


def lcm_layout(work: Path, tiny_model: Path) -> None:
    """The tiny model shipping a distilled model's LCM scheduler."""
    folder = work / "models/lcm"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "scheduler/scheduler_config.json").read_text())
    (folder / "scheduler/scheduler_config.json").write_text(json.dumps({**config, "_class_name": "LCMScheduler"}))


def init_lora(edit: Callable[[dict], dict]) -> Callable:
    """model.init_lora = lora/: the finished run's iteration-0 LoRA, its tensors passed through ``edit``."""
    def make(work: Path, tiny_model: Path) -> None:
        from safetensors.numpy import load_file, save_file

        tensors = load_file(str(work / "results/iter_000/checkpoint" / LORA))
        (work / "lora").mkdir()
        save_file(edit(tensors), str(work / "lora" / LORA))
    return make


def is_down(key: str) -> bool:
    """The [rank, in] half of a LoRA layer (diffusers' lora.down or peft's lora_A)."""
    return ".lora.down." in key or ".lora_A." in key


def rank_4(tensors):
    return {k: v[:4] if is_down(k) else v[:, :4] for k, v in tensors.items()}


def attention_only(tensors):
    return {k: v for k, v in tensors.items() if ".ff." not in k}


def sd3_keys(tensors):
    """The same tensors keyed as an SD3 LoRA: transformer.* instead of unet.*."""
    return {"transformer." + k.removeprefix("unet."): v for k, v in tensors.items()}


def wider_cross_attention(tensors):
    """attn2.to_k reads 96-wide text states (another architecture's cross-attention; this one's are 64)."""
    import numpy as np

    return {k: np.zeros((v.shape[0], 96), v.dtype) if ".attn2.to_k." in k and is_down(k) else v
            for k, v in tensors.items()}


def cut_weights(work: Path, tiny_model: Path) -> None:
    """The tiny model with its UNet weights cut at 60 % (a download interrupted midway)."""
    folder = work / "models/cut"
    shutil.copytree(tiny_model, folder)
    weights = folder / "unet/diffusion_pytorch_model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) * 6 // 10])


def dangling_link(work: Path, tiny_model: Path) -> None:
    """The tiny model laid out as a hub snapshot whose VAE blob a cache clean-up removed."""
    folder = work / "models/linked"
    shutil.copytree(tiny_model, folder)
    weights = folder / "vae/diffusion_pytorch_model.safetensors"
    weights.unlink()
    weights.symlink_to("../../blobs/0a1b2c")


def missing_shard(work: Path, tiny_model: Path) -> None:
    """The tiny model with its UNet in two shards (as large checkpoints come), the second one not downloaded."""
    folder = work / "models/sharded"
    shutil.copytree(tiny_model, folder)
    unet = folder / "unet"
    whole = unet / "diffusion_pytorch_model.safetensors"
    names = list(json.loads(whole.read_bytes()[8:8 + int.from_bytes(whole.read_bytes()[:8], "little")]))
    shards = [f"diffusion_pytorch_model-0000{k}-of-00002.safetensors" for k in (1, 2)]
    whole.rename(unet / shards[0])
    weight_map = {name: shards[i % 2] for i, name in enumerate(n for n in names if n != "__metadata__")}
    (unet / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


@dataclass
class Case:
    id: str
    config: dict  # merged over the run's test.yaml (as a second --configfile)
    message: str
    files: Callable | None = None


PROMPTS = "prompts/bad.txt"
BAD_PROMPTS = {"prompts": {"train": PROMPTS}}

PARSE_TIME = [
    # config keys, types and values (the schema)
    Case("unknown top-level key", {"trian": {"steps": 1}},
         "(top level): Additional properties are not allowed ('trian' was unexpected)"),
    Case("unknown nested key", {"train": {"lora": {"rnak": 4}}},
         "train.lora: Additional properties are not allowed ('rnak' was unexpected)"),
    Case("wrong type", {"train": {"steps": "ten"}}, "train.steps: 'ten' is not of type 'integer'"),
    Case("negative size", {"generate": {"batch_size": -1}}, "generate.batch_size: -1 is less than the minimum of 1"),
    Case("zero size", {"train": {"steps": 0}}, "train.steps: 0 is less than the minimum of 1"),
    Case("groups of one image (no pair to form)", {"generate": {"images_per_prompt": 1}},
         "generate.images_per_prompt: 1 is less than the minimum of 2"),
    Case("iterations < 1", {"iterations": 0}, "iterations: 0 is less than the minimum of 1"),
    # values a job would fail on after Snakemake had deleted the finished outputs their change made stale
    Case("an integer written as a float", {"train": {"steps": 2.0}}, "train.steps: 2.0 is not an integer (write 2)"),
    Case("iterations as a float", {"iterations": 2.0}, "iterations: 2.0 is not an integer (write 2)"),
    Case("NaN guidance scale (would turn guidance off)", {"generate": {"guidance_scale": float("nan")}},
         "generate.guidance_scale: nan is not a finite number"),
    Case("infinite learning rate", {"train": {"learning_rate": float("inf")}},
         "train.learning_rate: inf is not a finite number"),
    Case("negative seed", {"seed": -1}, "seed: -1 is less than the minimum of 0"),
    Case("negative eval seed", {"eval": {"seeds": [0, -2]}}, "eval.seeds.1: -2 is less than the minimum of 0"),
    Case("prompt longer than the text encoder takes, too_long: error",
         {"prompts": {"train": PROMPTS, "too_long": "error"},
          "rewards": {"color_match": None, "jpeg_compressibility": 1.0}},  # color_match reads captions only
         f"prompts.train ({PROMPTS}): prompt p00002 is 23 tokens for tokenizer, over its limit of 16",
         write(PROMPTS, "a red circle on a blue background\n" + "a red circle on a blue background " * 3 + "\n")),
    Case("resolution not divisible by 8", {"generate": {"resolution": 36}},
         "generate.resolution: 36 is not divisible by 8"),
    Case("negative learning rate", {"train": {"learning_rate": -1e-4}},
         "train.learning_rate: -0.0001 is less than or equal to the minimum of 0"),
    Case("beta <= 0", {"train": {"dpo": {"beta": 0}}}, "train.dpo.beta: 0 is less than or equal to the minimum of 0"),
    Case("an objective's option in the old flat place", {"train": {"beta": 2000}},
         "train.beta: now train.dpo.beta (each objective's options live in its own section)"),
    Case("negative pairs threshold", {"pairs": {"min_margin": -0.5}},
         "pairs.min_margin: -0.5 is less than the minimum of 0"),
    Case("reward weight not a number", {"rewards": {"color_match": "high"}},
         "rewards.color_match: 'high' is not valid under any of the given schemas (expected a number or an "
         "object with weight)"),
    Case("no reward left", {"rewards": {"color_match": None}}, "rewards: {} should be non-empty"),
    Case("empty eval seeds", {"eval": {"seeds": []}}, "eval.seeds: [] should be non-empty"),
    Case("unknown train.loss", {"train": {"loss": "ppo"}}, "train.loss: 'ppo' is not one of ['awm', 'dgpo', 'dpo', 'grpo', 'mixgrpo', 'nft', 'sft']"),
    Case("loss of another family", {"train": {"loss": "nft"}},
         "train.loss: nft is not available for model.family sd15"),
    Case("unknown device", {"device": "gpu"}, "device: 'gpu' does not match"),
    Case("more shards than batches", {"generate": {"shards": 4}}, "generate.shards: 4 shards but only 1 batch(es)"),
    # rewards
    Case("unknown reward", {"rewards": {"pickscroe": 1.0}}, "unknown reward 'pickscroe' in 'rewards'"),
    Case("unknown reward option", {"rewards": {"color_match": {"weight": 1.0, "max_distnace": 50}}},
         "'rewards.color_match': unknown option(s) max_distnace (expected max_distance)"),
    Case("missing aesthetic MLP checkpoint",
         {"rewards": {"aesthetic": {"weight": 1.0, "clip_path": "clip", "mlp_path": "aesthetic/missing.pth"}}},
         "'rewards.aesthetic.mlp_path': aesthetic/missing.pth does not exist", write("clip/config.json", "{}")),
    Case("missing HPS checkpoint", {"rewards": {"hpsv2": {"weight": 1.0, "checkpoint_path": "HPS_v2.1_compressed.pt"}}},
         "'rewards.hpsv2.checkpoint_path': HPS_v2.1_compressed.pt does not exist"),
    Case("eval reward repeating a training reward", {"eval": {"rewards": {"color_match": 1.0}}},
         "eval.rewards: color_match already in rewards"),
    # the base model
    Case("missing model folder", {"model": {"path": "models/nope"}}, "model.path: models/nope is not a folder"),
    Case("model folder without model_index.json", {"model": {"path": "models/empty"}},
         "model.path: models/empty has no model_index.json", write("models/empty/unet/config.json", "{}")),
    Case("SDXL folder for family sd15", {"model": {"path": "models/sdxl"}},
         "model.path: models/sdxl/model_index.json names 'StableDiffusionXLPipeline', a model.family sdxl model, "
         "but model.family sd15 expects StableDiffusionPipeline", sdxl_layout),
    Case("model folder shipping a scheduler the samplers cannot rebuild", {"model": {"path": "models/lcm"}},
         "model.path: models/lcm/scheduler/scheduler_config.json names 'LCMScheduler'; model.family sd15 expects a "
         "DDPM-style scheduler", lcm_layout),
    # weights files that are not what their names say, and a device that is not there: each would change
    # the jobs' params (fingerprint, device), so Snakemake would delete finished outputs before a job failed
    Case("model weights cut short (an interrupted download)", {"model": {"path": "models/cut"}},
         "model.path: models/cut/unet/diffusion_pytorch_model.safetensors is cut short: its header declares",
         cut_weights),
    Case("model weights behind a dangling link (a cleaned-up hub cache)", {"model": {"path": "models/linked"}},
         "model.path: models/linked/vae/diffusion_pytorch_model.safetensors is a link to ../../blobs/0a1b2c, "
         "which does not exist", dangling_link),
    Case("a sharded model whose index names a shard that is not there", {"model": {"path": "models/sharded"}},
         "model.path: models/sharded/unet/diffusion_pytorch_model.safetensors.index.json names 1 shard(s) that are "
         "not in models/sharded/unet: diffusion_pytorch_model-00002-of-00002.safetensors", missing_shard),
    Case("reward checkpoint cut short", {"rewards": {"hpsv2": {"weight": 1.0, "checkpoint_path": "hps/HPS.pt"}}},
         "rewards.hpsv2.checkpoint_path: hps/HPS.pt (1004 bytes) is not a complete torch checkpoint",
         write("hps/HPS.pt", b"PK\x03\x04" + bytes(1000))),
    Case("a CUDA device on a host without one", {"device": "cuda"}, "device: cuda, but torch"),
    # prompt files
    Case("missing prompt file", {"prompts": {"eval": "prompts/nope.txt"}},
         "prompts.eval (prompts/nope.txt): file not found"),
    Case("a folder as the prompt file", {"prompts": {"eval": "prompts"}},
         "prompts.eval (prompts): a folder, not a prompt file (give the file in it)"),
    Case("empty prompt file", BAD_PROMPTS, f"prompts.train ({PROMPTS}): no prompts in file", write(PROMPTS, "\n  \n")),
    Case("non-UTF-8 prompt file", BAD_PROMPTS, f"prompts.train ({PROMPTS}): not UTF-8 text",
         write(PROMPTS, "a red circle on a caf\xe9 background\n".encode("latin-1"))),
    Case("JSONL row without prompt", {"prompts": {"train": "prompts/bad.jsonl"}},
         "prompts.train (prompts/bad.jsonl): line 2 has no string field 'prompt'",
         write("prompts/bad.jsonl", jsonl({"prompt": "a red circle on a blue background"}, {"text": "a red square"}))),
    Case("JSONL row that is not JSON", {"prompts": {"train": "prompts/bad.jsonl"}},
         "prompts.train (prompts/bad.jsonl): line 2 is not valid JSON",
         write("prompts/bad.jsonl", jsonl({"prompt": "a red circle"}) + "{prompt: a red square\n")),
    Case("OCR prompt without a quoted target", {"rewards": {"ocr": 1.0, "color_match": None}, **BAD_PROMPTS},
         f"prompts.train ({PROMPTS}), prompt p00002: reward 'ocr' needs a double-quoted target text",
         write(PROMPTS, 'a sign that says "open"\na sign without text\n')),
    Case("duplicate prompt ids", {"prompts": {"train": "prompts/bad.jsonl"}},
         "prompts.train (prompts/bad.jsonl): line 3: duplicate prompt id 'sign' (first on line 1)",
         write("prompts/bad.jsonl", jsonl({"id": "sign", "prompt": "a"}, {"id": "b", "prompt": "b"},
                                          {"id": "sign", "prompt": "c"}))),
    Case("prompt id with a path separator", {"prompts": {"train": "prompts/bad.jsonl"}},
         "prompts.train (prompts/bad.jsonl): line 2: prompt id 'x/../../y' contains a path separator",
         write("prompts/bad.jsonl", jsonl({"id": "a", "prompt": "a"}, {"id": "x/../../y", "prompt": "b"}))),
    Case("prompt id '..'", {"prompts": {"eval": "prompts/bad.jsonl"}},
         "prompts.eval (prompts/bad.jsonl): line 1: prompt id '..' contains '..'",
         write("prompts/bad.jsonl", jsonl({"id": "..", "prompt": "a"}))),
    # model.init_lora
    Case("init LoRA folder without weights", {"model": {"init_lora": "lora"}},
         f"model.init_lora: lora has no {LORA}", write("lora/README", "")),
    Case("init LoRA of another rank", {"model": {"init_lora": "lora"}},
         f"model.init_lora: lora/{LORA}: rank 4, but train.lora.rank is 8", init_lora(rank_4)),
    Case("init LoRA on other targets", {"model": {"init_lora": "lora"}},
         f"model.init_lora: lora/{LORA}: has no layers for train.lora.targets ff.net.0.proj, ff.net.2",
         init_lora(attention_only)),
    Case("init LoRA of another family (SD3)", {"model": {"init_lora": "lora"}},
         f"model.init_lora: lora/{LORA}: no LoRA layers for the unet of model.family sd15 (its layers are for "
         "transformer", init_lora(sd3_keys)),
    Case("init LoRA of another architecture", {"model": {"init_lora": "lora"}},
         f"model.init_lora: lora/{LORA}: layer down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k is 96 -> 32 "
         "in the LoRA but 64 -> 32 in model.path", init_lora(wider_cross_attention)),
]


@pytest.mark.parametrize("case", PARSE_TIME, ids=[c.id for c in PARSE_TIME])
def test_bad_config_stops_before_any_job(run, tiny_model, case):
    if case.files:
        case.files(run, tiny_model)
    (run / "bad.yaml").write_text(yaml.safe_dump(case.config))
    before = snapshot(run)
    output = snakemake_fails(run, configfiles=("bad.yaml",))
    assert case.message in output, output[-3000:]
    assert "rule " not in output  # no job was even planned
    assert snapshot(run) == before


def test_malformed_yaml_stops_before_any_job(run):
    """Snakemake reads --configfile itself, before the workflow's code runs: its message says what is
    wrong, not which file (with one --configfile, the one given)."""
    (run / "bad.yaml").write_text("train: {steps: 2\n")
    before = snapshot(run)
    output = snakemake_fails(run, configfiles=("bad.yaml",))
    assert "Config file is not valid JSON or YAML" in output
    assert snapshot(run) == before


def test_fewer_iterations_than_results_hold_is_refused(run):
    before = snapshot(run)
    output = snakemake_fails(run, "--config", "iterations=1")
    assert "iterations: 1, but results/ already holds iter_001 of a longer run; set iterations: 2" in output
    assert snapshot(run) == before


def test_a_fanout_beside_a_finished_single_run_is_refused(run):
    """experiments: added to the config of a finished single run would plan results/<experiment>/seed_<s>/ beside
    its iter_XXX/, and summary and best would read the old run without a word."""
    before = snapshot(run)
    (run / "fanout.yaml").write_text(yaml.safe_dump({"experiments": {"low_lr": {"train": {"learning_rate": 1e-5}}},
                                                     "seeds": [0]}))
    output = snakemake_fails(run, "-n", configfiles=("fanout.yaml",))
    assert ("experiments: a fan-out writes results/<experiment>/seed_<s>/, but results/ holds a single run "
            "(iter_000, iter_001) that summary, best and compare would read beside it; move results/ aside first") in output
    assert snapshot(run) == before


def test_concurrent_run_in_the_same_results_folder_is_refused(run):
    """A second snakemake in the folder of a running one (stopped while it holds the lock) refuses to start;
    the first then finishes as if alone."""
    (run / "results/iter_001/grid.png").unlink()  # work for both runs: the eval job that writes the grids
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(run), "--configfile", str(run / "test.yaml"),
           "--cores", "1"]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    lock = run / "results/.rewardloop.lock"
    try:
        deadline = time.monotonic() + 120
        while lock.read_text().strip() != str(first.pid):
            assert first.poll() is None and time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGSTOP)  # holds the lock, writes nothing while the second one tries
        before = snapshot(run)
        output = snakemake_fails(run)
        assert f"results: another rewardloop run is active in this results folder (pid {first.pid})" in output
        assert snapshot(run) == before
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    assert first.wait(timeout=300) == 0
    assert (run / "results/iter_001/grid.png").is_file()


def test_a_read_only_results_folder_is_planned_and_refused_by_name(run):
    """Issue 46 §7: a finished run in a read-only results/ can be planned (its lock probe only reads; it gave a
    raw PermissionError before), and a run that would rewrite a finished file names it before any job starts
    (Snakemake's check; our lock's message, runtime/runlock.py, covers what it does not)."""
    chattr = immutable_folder(run / "results")
    try:
        before = snapshot(run)
        assert not planned_jobs(snakemake(run, "-n"))
        for args in (("-n", "--forcerun", "report_config"), ("--forcerun", "report_config")):
            output = snakemake_fails(run, *args)
            assert "Write-protected output files for rule report_config" in output, output[-3000:]
            assert "results/report/config.yaml" in output and "PermissionError" not in output, output[-3000:]
        assert snapshot(run) == before
    finally:
        chattr("-i")


# --- damaged artifacts: the stage that reads them names the file, the row or the sample --------------


def garbage(path: Path) -> None:
    path.write_bytes(b"PAR1 this is not a parquet file " * 10)


def truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def without_reward_column(path: Path) -> None:
    table = pq.read_table(path)
    pq.write_table(table.drop(["reward"]), path)


def undecodable_image(path: Path) -> str:
    from rewardloop.stages.common import to_arrow

    original = pq.read_table(path)
    table = original.to_pandas()
    table.at[1, "image"] = {"bytes": b"not a png", "path": table.sample_id[1] + ".png"}
    pq.write_table(to_arrow(table).replace_schema_metadata(original.schema.metadata), path)  # the record kept
    return table.sample_id[1]


def without_a_row(path: Path) -> str:
    """Row 3 dropped by pyarrow, the schema metadata (the record generate left) kept: what a user's edit does."""
    table = pq.read_table(path)
    dropped = table.column("sample_id")[3].as_py()
    pq.write_table(pa.concat_tables([table.slice(0, 3), table.slice(4)]), path)
    return dropped


def replaced_by_another_program(path: Path) -> str:
    """The same number of rows, other sample ids, written by pandas: no record of its rows, no provenance."""
    frame = pq.read_table(path).to_pandas()
    frame["sample_id"] = [f"other-{k}" for k in range(len(frame))]
    frame.to_parquet(path)
    return frame.sample_id[0]


def without_first_chosen_latents(path: Path) -> str:
    from safetensors.numpy import load_file, save_file

    chosen = pq.read_table(path.with_name("pairs.parquet")).column("chosen")[0].as_py()
    tensors = load_file(str(path))
    del tensors[f"latents/{chosen}"]
    save_file(tensors, str(path))
    return chosen


# What each reading stage writes: Snakemake removes these before the stage reruns on the damaged file
# (the rerun protection restores them when the stage fails).
STAGE_OUTPUTS = {
    "score": ("scores.parquet", "metrics/score.json"),
    "pairs": ("pairs.parquet", "metrics/pairs.json"),
    "train": (f"train/{LORA}", "metrics/train.json"),
    "preflight": ("preflight_figures.json",),  # iteration 0 only: it replays the first pairs' DPO loss
}
DAMAGED = [
    # (id, damaged file, damage (returns the damaged sample), the stage that reads it first, message)
    ("corrupt Parquet", "iter_000/samples.parquet", garbage, "score",
     "results/iter_000/samples.parquet: not a readable Parquet file"),
    ("truncated Parquet", "iter_000/scores.parquet", truncated, "pairs",
     "results/iter_000/scores.parquet: not a readable Parquet file"),
    ("Parquet without a column", "iter_000/scores.parquet", without_reward_column, "pairs",
     "results/iter_000/scores.parquet: missing column(s) reward"),
    ("undecodable image", "iter_000/samples.parquet", undecodable_image, "score",
     "results/iter_000/samples.parquet: sample {sample}: image does not decode"),
    ("samples.parquet with a row dropped", "iter_000/samples.parquet", without_a_row, "score",
     "results/iter_000/samples.parquet: 7 rows but generate recorded 8 (sample_id {sample} missing): the file was "
     "changed after generate wrote it; delete it to redo generate"),
    ("samples.parquet replaced by another program", "iter_000/samples.parquet", replaced_by_another_program,
     "score", "results/iter_000/samples.parquet: carries neither the record of its rows (rewardloop_rows) nor "
     "rewardloop's provenance: not a table a stage of this workflow wrote"),
    ("latents missing a sample, preflight", "iter_000/latents.safetensors", without_first_chosen_latents,
     "preflight", "results/iter_000/latents.safetensors: has no tensor 'latents/{sample}'"),
    ("latents missing a sample, train", "iter_001/latents.safetensors", without_first_chosen_latents, "train",
     "results/iter_001/latents.safetensors: has no tensor 'latents/{sample}'"),
]


@pytest.mark.parametrize("name, damaged, damage, stage, message", DAMAGED, ids=[d[0] for d in DAMAGED])
def test_damaged_artifact_is_named_by_the_stage_reading_it(run, name, damaged, damage, stage, message):
    sample = damage(run / "results" / damaged)  # newer than the stage's outputs: the stage reruns
    iteration = damaged.split("/")[0]
    before = snapshot(run, skip=ATTEMPT_RECORDS)
    output = snakemake_fails(run, f"results/{iteration}/train/{LORA}")  # every reading stage is upstream of train
    assert message.format(sample=sample) in output, output[-3000:]
    # Snakemake removed the failed job's outputs before it ran; the rerun protection gave the finished
    # versions back, byte for byte and with their mtimes (nothing half written, nothing lost) ...
    redone = [f"{iteration}/{name}" for name in STAGE_OUTPUTS[stage]]
    assert "rewardloop: a failed job had removed finished work: restored" in output, output[-3000:]
    assert all(name in output for name in redone), output[-3000:]
    assert snapshot(run, skip=ATTEMPT_RECORDS) == before
    # ... and they do not pass for the damaged file's: the stage that read it is planned again.
    plan = planned_jobs(snakemake(run, "-n", f"results/{iteration}/train/{LORA}"))
    assert stage in {rule for rule, _ in plan}, plan


def test_a_rerun_that_fails_keeps_the_recorded_config_of_the_finished_results(run):
    """The run's recorded config (report/config.yaml, what `rewardloop benchmark` reads) changes only with the
    results it describes: a rerun under another config that fails after report_config rewrote it puts it back."""
    truncated(run / "results/iter_000/scores.parquet")  # pairs rereads it and fails
    overlay = yaml.safe_load((run / "test.yaml").read_text())
    overlay["tracking"]["experiment"] = "renamed"  # a config change only report_config reads (tracking is off)
    write_overlay(run, overlay)
    before = snapshot(run, skip=ATTEMPT_RECORDS)
    # (2 cores: report_config runs beside pairs, and Snakemake lets it finish when pairs fails)
    output = snakemake_fails(run, f"results/iter_000/train/{LORA}", "results/report/config.yaml", "--cores", "2")
    assert "results/iter_000/scores.parquet: not a readable Parquet file" in output, output[-3000:]
    assert re.search(r"Finished jobid: \d+ \(Rule: report_config\)", output), output[-3000:]  # it did rewrite it
    assert "restored" in output and "report/config.yaml" in output, output[-3000:]
    assert snapshot(run, skip=ATTEMPT_RECORDS) == before  # the recorded config too, bytes and mtime
    assert yaml.safe_load((run / "results/report/config.yaml").read_text())["tracking"]["experiment"] != "renamed"
    # its record is the finished run's again: the next run under the new config records it anew
    assert ("report_config", "") in planned_jobs(snakemake(run, "-n", "results/report/config.yaml"))


def test_unreachable_mlflow_server_does_not_stop_the_run(run):
    """The special case: tracking is beside the loop, so the run goes on (exit 0), says so in the tracking
    marker and log, and no stage artifact changes."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    overlay = yaml.safe_load((run / "test.yaml").read_text())
    overlay["tracking"]["enabled"] = True
    write_overlay(run, overlay)
    before = snapshot(run, skip=ATTEMPT_RECORDS)
    snakemake(run, "results/tracking/run.json", "results/iter_000/tracking.json",
              env={"MLFLOW_TRACKING_URI": dead, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                   "MLFLOW_HTTP_REQUEST_TIMEOUT": "3", "MLFLOW_DISABLE_TELEMETRY": "true"})
    marker = json.loads((run / "results/iter_000/tracking.json").read_text())
    assert marker["status"] == "skipped" and "forcerun tracking_run" in marker["reason"], marker  # run.json failed
    assert dead.split("//")[1] in json.loads((run / "results/tracking/run.json").read_text())["reason"]
    assert "tracking FAILED" in (run / "results/logs/tracking/run.log").read_text()
    after = snapshot(run, skip=ATTEMPT_RECORDS)
    assert set(after) - set(before) == {"tracking/run.json", "iter_000/tracking.json"}
    assert {k: after[k] for k in before} == before
