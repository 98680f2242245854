"""GPUs each job asks for (the generic Snakemake resource ``gpu``), derived from the config.

Snakemake counts ``gpu`` against ``--resources gpu=N`` locally and the SLURM executor turns it into
``--gpus=N``. A model job wants ``resources.gpu`` GPUs (default: one when ``device`` is CUDA, none on
the CPU); scoring wants one only when a reward runs on CUDA (OCR and the model-free rewards never
do); training wants one per process.
"""

from __future__ import annotations

from typing import Mapping

from rewardloop.rewards.combine import parse_reward_specs

# The jobs that load no model, in two sizes (a SLURM profile's set-resources overrides either per rule):
# LIGHT_JOB copies or writes a small file (a marker, the guard's verdict, the run's config);
# TABLE_JOB reads an iteration's or a run's tables (pairs, advantages, MLflow's points, the plots).
LIGHT_JOB = {"mem_mb": 1000, "runtime": 5}
TABLE_JOB = {"mem_mb": 2000, "runtime": 10}


def uses_cuda(device: str) -> bool:
    """Whether a model stage on ``device`` runs on a GPU (``auto``: when this host has one)."""
    if device == "auto":
        import torch

        return torch.cuda.is_available()
    return str(device).startswith("cuda")


def model_gpus(config: Mapping) -> int:
    """GPUs of a model job (generate, eval, one training process)."""
    configured = config["resources"]["gpu"]
    if configured is not None:
        return configured
    return 1 if uses_cuda(config["device"]) else 0


def score_gpus(config: Mapping) -> int:
    """GPUs of the score job: the model job's count when any reward runs on CUDA, else none."""
    on_cuda = any(str(options.get("device", "cpu")).startswith("cuda")
                  for _, _, options in parse_reward_specs(config["rewards"]))
    return model_gpus(config) if on_cuda else 0


def train_processes(train_cfg: Mapping, job_gpus: int) -> int:
    """Processes of a train job with ``job_gpus`` GPUs: ``train.num_processes``, else one per GPU, at least one.

    The job script passes its actual ``gpu`` resource (a profile's set-resources may override the config's).
    """
    from rewardloop.objectives import get_objective

    if not get_objective(train_cfg["loss"]).multi_process:
        return 1  # GRPO/NFT do not split their micro-batches over ranks (config.check_objective)
    configured = train_cfg["num_processes"]
    return configured if configured is not None else max(1, int(job_gpus or 0))


def train_gpus(config: Mapping) -> int:
    """GPUs of the train job: one per process on CUDA, none on the CPU."""
    gpus = model_gpus(config)
    return train_processes(config["train"], gpus) if gpus > 0 else 0


def extend_rule_settings(resource_settings, prefixes) -> None:
    """Give the rules of an experiments fan-out's runs (``<prefix><rule>``) the per-rule resources and
    threads that name ``<rule>`` (``set-resources``/``set-threads`` of a profile such as profiles/slurm,
    or of the command line), unless the prefixed name has its own entry.

    Snakemake matches those entries by the exact rule name, and a module's rules are renamed; it reads
    them from these parsed mappings when it defines each rule, so this runs before the modules' rules are.
    """
    for mapping in (resource_settings._parsed_overwrite_resources, resource_settings._parsed_overwrite_threads):
        for rule, value in list(mapping.items()):
            for prefix in prefixes:
                mapping.setdefault(f"{prefix}{rule}", value)


def rule_overrides(resource_settings, rule: str) -> dict:
    """The resources a profile's (or the command line's) set-resources give ``rule``: the value, or for one
    Snakemake evaluates per job (a string such as "srun" or "4h") the text as given."""
    parsed = resource_settings._parsed_overwrite_resources.get(rule, {})
    return {name: resource.raw if resource.is_evaluable() else resource.value for name, resource in parsed.items()}


def job_resources(config: Mapping, extra_mem_mb: int = 0, gpu: int | None = None) -> dict:
    """mem_mb, runtime and gpu of a job that loads a model: ``resources``' memory (plus ``extra_mem_mb``) and
    runtime, and ``gpu`` GPUs (default: a model job's, :func:`model_gpus`)."""
    return {
        "mem_mb": config["resources"]["mem_mb"] + extra_mem_mb,
        "runtime": config["resources"]["runtime"],
        "gpu": model_gpus(config) if gpu is None else gpu,
    }


def gather_resources(config: Mapping) -> dict:
    """A gather job's (it joins shards' tables, no model): ``resources``' memory, 10 minutes."""
    return {"mem_mb": config["resources"]["mem_mb"], "runtime": 10}
