"""Small input checks: repeated eval seeds, eval prompts that are also train prompts (prompts.overlap),
and `rewardloop inspect` on a malformed or a huge JSON file."""

from __future__ import annotations

import pytest
import yaml

from rewardloop.cli import main as cli
from rewardloop import config as cfgmod
from rewardloop.config import ConfigError, startup_warnings
from rewardloop.reports.inspect import MAX_JSON_BYTES, describe
from workflow_helpers import ROOT


def default_config(**sections) -> dict:
    """config.yaml with the repository's prompt files and ``sections`` deep-merged over it."""
    given = yaml.safe_load((ROOT / "config.yaml").read_text())
    given["prompts"] = {key: str(ROOT / f"resources/prompts/{key}.txt") for key in ("train", "eval")}
    return cfgmod.deep_merge(given, sections)


def test_a_repeated_eval_seed_is_refused():
    """The same seed twice would sample, and score, the same eval image twice."""
    with pytest.raises(ConfigError, match=r"eval\.seeds: \[0, 1, 0\] has non-unique elements"):
        cfgmod.validate(default_config(eval={"seeds": [0, 1, 0]}))


# --- eval prompts that are also train prompts -----------------------------------------------------------

TRAIN = [f"a red circle on a {colour} background" for colour in ("blue", "green", "white", "black", "yellow", "purple")]


@pytest.fixture
def overlapping(tmp_path) -> dict:
    """Six train prompts; an eval file holding all six (in other case and spacing) and one more."""
    (tmp_path / "train.txt").write_text("\n".join(TRAIN) + "\n")
    held_out = ["a blue square on a red background", *(p.upper().replace(" ", "  ") for p in reversed(TRAIN))]
    (tmp_path / "eval.txt").write_text("\n".join(held_out) + "\n")
    return {"train": str(tmp_path / "train.txt"), "eval": str(tmp_path / "eval.txt")}


def test_eval_prompts_that_are_train_prompts_are_named_at_startup(overlapping):
    lines = startup_warnings(cfgmod.validate(default_config(prompts=overlapping)))
    assert lines == [f"rewardloop: prompts.eval ({overlapping['eval']}): 6 of its 7 prompts are also in prompts.train "
                     f"({overlapping['train']}): p00002 (= train p00006), p00003 (= train p00005), "
                     "p00004 (= train p00004), p00005 (= train p00003), p00006 (= train p00002) and 1 more; "
                     "the eval does not hold them out (prompts.overlap: error stops instead)"]


def test_prompts_overlap_error_stops_before_any_job(overlapping):
    with pytest.raises(ConfigError, match=r"^prompts\.eval \(.*eval\.txt\): 6 of its 7 prompts are also in "
                                          r"prompts\.train .* \(prompts\.overlap: error\)$"):
        cfgmod.validate(default_config(prompts={**overlapping, "overlap": "error"}))


def test_held_out_prompts_pass_quietly():
    config = cfgmod.validate(default_config(prompts={"overlap": "error"}))  # the shipped files are disjoint
    assert startup_warnings(config) == []


def test_half_precision_rollouts_on_the_cpu_are_named_at_startup():
    for half in ("fp16", "bf16"):
        lines = startup_warnings(cfgmod.validate(default_config(generate={"precision": half})))
        assert lines == [f"rewardloop: generate.precision: {half} with device: cpu: half precision is slower than "
                         "fp32 on a CPU (the tiny model's rollouts x4.5 in fp16, x3.5 in bf16, measured on 2 cores) "
                         "and rounds more; fp32 (or auto) is the CPU's precision"]
    assert startup_warnings(cfgmod.validate(default_config(generate={"precision": "fp16"}, device="cuda"))) == []
    assert startup_warnings(cfgmod.validate(default_config(generate={"precision": "fp32"}))) == []


def test_a_single_run_beside_a_fanouts_runs_is_refused(tmp_path):
    (tmp_path / "results/low_lr/seed_0/iter_000").mkdir(parents=True)
    config = cfgmod.validate(default_config())
    with pytest.raises(ConfigError, match=r"experiments: none, but .*results/ holds a fan-out's runs \(low_lr/seed_0\); "
                                          r"a single run would write .*results/iter_XXX/ beside them"):
        cfgmod.check_results_layout(config, tmp_path / "results")
    cfgmod.check_results_layout(config, tmp_path / "elsewhere")  # nothing there: either layout may start


# --- rewardloop inspect on JSON ------------------------------------------------------------------------


def test_inspect_names_a_malformed_json_file_and_where_it_breaks(tmp_path, capsys):
    path = tmp_path / "metrics.json"
    path.write_text('{\n  "train/loss": 0.25,\n  "train/kl_loss": \n}\n')
    assert cli.main(["inspect", str(path)]) == 1
    assert capsys.readouterr().err == (f"rewardloop inspect: error: {path}: not valid JSON "
                                       "(Expecting value: line 4 column 1 (char 44))\n")


def test_inspect_does_not_read_a_huge_json_file(tmp_path, capsys):
    """A sparse file: no disk used, and its zero bytes would not parse if they were read."""
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(MAX_JSON_BYTES + 2**20)
    (tmp_path / "small.json").write_text('{"rank": 4}')
    assert describe(huge) == f"{huge}: JSON, 65.0 MiB, too large to summarise (limit 64 MiB)"
    assert cli.main(["inspect", "-v", str(tmp_path)]) == 0  # the folder's other artifacts are still shown
    assert capsys.readouterr().out.splitlines()[:4] == [describe(huge), "", f"{tmp_path / 'small.json'}", "{"]
    assert cli.main(["inspect", str(tmp_path)]) == 0  # and listed briefly, without reading the huge one
    assert [line.split() for line in capsys.readouterr().out.splitlines()[1:]] == [
        ["huge.json", "JSON,", "65.0", "MiB,", "too", "large", "to", "summarise"], ["small.json", "JSON,", "1", "keys"]]


def test_inspect_lists_at_most_max_listed_artifacts_and_says_how_many_it_left_out(tmp_path, capsys):
    from rewardloop.reports.inspect import MAX_LISTED

    for k in range(MAX_LISTED + 5):
        (tmp_path / f"m{k:05d}.json").write_text('{"k": 1}')
    assert cli.main(["inspect", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{tmp_path}: {MAX_LISTED + 5} artifacts (details: rewardloop inspect -v)"
    assert len(lines) == MAX_LISTED + 2 and lines[-2].split()[0] == f"m{MAX_LISTED - 1:05d}.json"
    assert lines[-1] == f"... and 5 more artifact(s) not shown (at most {MAX_LISTED}; inspect a subfolder for the rest)"
    assert cli.main(["inspect", "-v", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count('"k": 1') == MAX_LISTED


def test_a_parquet_footer_that_declares_more_than_a_reader_takes_is_refused_before_it_is_read(tmp_path, capsys):
    """The footer's size is the file's last 8 bytes' first 4: a crafted one declaring 100 MiB (pyarrow would
    allocate what it declares) is refused by inspect and by every stage's reader, naming the file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rewardloop.artifacts import MAX_PARQUET_FOOTER, ArtifactError, read_table

    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table({"sample_id": ["a"], "reward": [1.0]}), path)
    data = bytearray(path.read_bytes())
    data[-8:-4] = (100 * 2**20).to_bytes(4, "little")
    data[-8 - 4:-8] = b"\0" * 4  # and garbage where the footer ends, so no real footer parses
    path.write_bytes(bytes(data))
    message = (f"{path}: not a readable Parquet file (its footer declares {100 * 2**20} bytes of metadata, the file "
               f"has {len(data)} bytes; a reader takes at most {MAX_PARQUET_FOOTER // 2**20} MiB)")
    assert cli.main(["inspect", str(path)]) == 1
    assert capsys.readouterr().err == f"rewardloop inspect: error: {message}\n"
    assert cli.main(["inspect", str(tmp_path)]) == 0
    assert "scores.parquet  unreadable (ArtifactError)" in capsys.readouterr().out
    with pytest.raises(ArtifactError, match="its footer declares 104857600 bytes"):
        read_table(path)
    path.write_bytes(b"PAR1" + bytes(4))
    with pytest.raises(ArtifactError, match=r"not a readable Parquet file \(8 bytes, too short for one\)"):
        read_table(path)


def test_a_pickled_init_lora_is_refused_saying_why(tmp_path):
    """A LoRA saved as a pickle (pytorch_lora_weights.bin) is not loaded: the error says it can run code."""
    from rewardloop.models.files import ModelError
    from rewardloop.models.lora import check_init_lora

    (tmp_path / "pytorch_lora_weights.bin").write_bytes(b"not read")
    with pytest.raises(ModelError, match=r"has no pytorch_lora_weights\.safetensors; it holds pytorch_lora_weights\.bin, "
                                         r"a pickle, which can run code when it is loaded, so it is not read"):
        check_init_lora({"init_lora": str(tmp_path), "family": "sd15", "path": "unused"}, {})


def test_a_reward_checkpoint_that_torch_refuses_says_why(tmp_path):
    """A checkpoint whose pickle would run code is refused by torch.load(weights_only=True), and the message says
    why pickles are refused and what to save instead."""
    import pickle

    from rewardloop.rewards.clip_common import safe_torch_load

    class Payload:
        def __reduce__(self):
            return (print, ("this would run",))

    path = tmp_path / "aesthetic.pt"
    path.write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ValueError, match=r"a pickle can run code when it is loaded.*safetensors\.torch\.save_file"):
        safe_torch_load("aesthetic", "checkpoint", path)


def test_more_training_processes_than_rollouts_is_refused_naming_the_keys():
    """An advantage objective splits each batch's samples over the ranks: more ranks than samples cannot run."""
    with pytest.raises(ConfigError, match=r"^train\.num_processes: 8 processes for 4 samples per iteration "
                                          r"\(generate\.prompts_per_iteration x generate\.images_per_prompt\)"):
        cfgmod.load(ROOT / "configs/tiny_sd3_grpo.yaml", {"train": {"num_processes": 8},
                                                          "generate": {"prompts_per_iteration": 1,
                                                                       "images_per_prompt": 4}})
    cfg = cfgmod.load(ROOT / "configs/tiny_sd3_grpo.yaml", {"train": {"num_processes": 4},
                                                            "generate": {"prompts_per_iteration": 1,
                                                                         "images_per_prompt": 4}})
    assert cfg["train"]["num_processes"] == 4


@pytest.mark.parametrize(("option", "key"), [({"mixed_precision": "fp16"}, "train.mixed_precision: fp16"),
                                             ({"optimizer": "adafactor"}, "train.optimizer: adafactor"),
                                             ({"reference_offload": True}, "train.reference_offload: True")])
def test_fsdp_with_an_option_it_cannot_honour_is_refused_naming_the_keys(option, key):
    """train.distributed: fsdp shards the weights (rewardloop.training.fsdp): fp16's scaler, Adafactor's factored
    states and an offloaded reference do not work on shards."""
    with pytest.raises(ConfigError, match=rf"^train\.distributed: fsdp with {key}: "):
        cfgmod.validate(default_config(train={"distributed": "fsdp", "num_processes": 2, **option}))
    cfg = cfgmod.validate(default_config(train={"distributed": "fsdp", "num_processes": 2}))
    assert cfg["train"]["distributed"] == "fsdp"
    assert cfgmod.validate(default_config(train=option))["train"]["distributed"] == "ddp"  # the default
