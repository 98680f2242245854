"""GPUs each job asks for, from the config."""

from __future__ import annotations

import copy

import pytest

from rewardloop import config as cfgmod
from rewardloop.runtime import resources


@pytest.fixture(scope="module")
def base(repo_root):
    return cfgmod.load(repo_root / "config.yaml")


def with_(base, **sections):
    return cfgmod.deep_merge(copy.deepcopy(base), sections)


def test_cpu_runs_ask_for_no_gpu(base):
    assert base["device"] == "cpu"
    cfg = base
    assert (resources.model_gpus(cfg), resources.score_gpus(cfg), resources.train_gpus(cfg)) == (0, 0, 0)
    assert resources.train_processes(cfg["train"], resources.model_gpus(cfg)) == 1
    assert resources.train_processes(with_(base, train={"num_processes": 2})["train"], 0) == 2
    assert resources.train_gpus(with_(base, train={"num_processes": 2})) == 0  # gloo on the CPU


def test_cuda_runs_ask_for_gpus_but_cpu_rewards_do_not(base):
    cuda = with_(base, device="cuda", rewards={"ocr": {"weight": 1.0}, "color_match": 1.0})
    assert resources.model_gpus(cuda) == 1
    assert resources.score_gpus(cuda) == 0  # OCR and the model-free rewards are CPU work
    scored_on_gpu = with_(cuda, rewards={"pickscore": {"weight": 1.0, "device": "cuda"}})
    assert resources.score_gpus(scored_on_gpu) == 1
    assert resources.train_gpus(cuda) == 1
    four = with_(cuda, resources={"gpu": 4})
    assert resources.model_gpus(four) == 4 and resources.train_gpus(four) == 4
    # A profile's set-resources may give the train job more GPUs than the config: one process each.
    assert resources.train_processes(cuda["train"], 8) == 8
    assert resources.train_gpus(with_(cuda, train={"num_processes": 2})) == 2


def test_gpu_resource_is_validated(base):
    bad = with_(base, resources={"gpu": -1})
    with pytest.raises(cfgmod.ConfigError, match="resources.gpu"):
        cfgmod.validate(bad)


def test_a_model_jobs_resources_are_the_configs_and_a_gather_job_takes_ten_minutes(base):
    cfg = with_(base, resources={"mem_mb": 6000, "runtime": 45, "gpu": 2})
    assert resources.job_resources(cfg) == {"mem_mb": 6000, "runtime": 45, "gpu": 2}
    assert resources.job_resources(cfg, extra_mem_mb=500, gpu=0) == {"mem_mb": 6500, "runtime": 45, "gpu": 0}
    assert resources.job_resources(base)["gpu"] == 0  # on the CPU, resources.gpu unset
    assert resources.gather_resources(cfg) == {"mem_mb": 6000, "runtime": 10}
    assert resources.LIGHT_JOB["mem_mb"] < resources.TABLE_JOB["mem_mb"] < cfg["resources"]["mem_mb"]


def test_export_and_rescore_jobs_read_only_their_part_of_the_config(base):
    from rewardloop.runtime.job_config import export_config, rescore_config

    cfg = with_(base, gold_rewards={"jpeg_compressibility": 1.0, "aesthetic": None}, score={"batch_size": 7})
    exported = export_config(cfg, ("old",))
    assert exported["train"] == {"adapter": "lora", "extra_adapters": ["old"]}
    assert set(exported) == {"model", "export", "train"} and exported["export"] == cfg["export"]
    assert export_config(cfg)["train"] == {"adapter": "lora"}
    rescore = rescore_config(cfg, "jpeg_compressibility")
    assert set(rescore) == {"gold", "score"} and list(rescore["gold"]) == ["jpeg_compressibility"]
    assert rescore["score"] == {"batch_size": 7}
