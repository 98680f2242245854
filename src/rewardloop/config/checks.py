"""The checks a schema cannot express: sizes, files on disk, prompts the rewards can score, the objective
against the model family, results of a longer run. All run at startup, before any job.

They reach into half the package (models, objectives, rewards, prompts, which import torch); those
imports stay inside the functions, so that importing the config's schema stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from rewardloop.config.schema import ConfigError
from rewardloop.runtime.job_config import eval_guidance_scale, guidance_evals, local_inputs

# prompts.overlap's message names this many of the shared prompts (then counts the rest).
OVERLAP_IDS = 5


def check_semantics(config: dict) -> None:
    """Checks beyond the schema: sizes, files on disk, prompts the rewards can score."""
    from rewardloop.models import lora, loading as models
    from rewardloop import prompts, rewards
    from rewardloop.rewards.remote.client import check_remote_rewards

    if config["generate"]["resolution"] % 8:
        raise ConfigError(
            f"generate.resolution: {config['generate']['resolution']} is not divisible by 8"
        )
    models.check_model_reference(config["model"])
    check_input_files(config)
    if not config["model"]["build_tiny"] and Path(config["model"]["path"]).is_dir():
        from rewardloop.models.layout import check_guidance, check_resolution

        check_resolution(config["model"]["path"], config["model"]["family"], config["generate"]["resolution"])
        scales = [("generate.guidance_scale", config["generate"]["guidance_scale"]),
                  ("eval.guidance_scale", config["eval"].get("guidance_scale")),
                  *(("eval.also_at_guidance", g) for g in config["eval"].get("also_at_guidance") or [])]
        for key, scale in scales:
            if scale is not None:
                check_guidance(config["model"]["path"], config["model"]["family"], scale, key)
    lora.check_init_lora(config["model"], config["train"])
    offline = config["data"]["offline_pairs"]
    if offline and not Path(offline).is_file():
        raise ConfigError(f"data.offline_pairs: {offline} is not a file (expected a Pick-a-Pic layout Parquet)")
    check_objective(config)
    check_distributed(config["train"])
    check_guidance_evals(config)
    sections = {"rewards": config["rewards"], "eval.rewards": config["eval"].get("rewards") or {},
                "gold_rewards": config["gold_rewards"]}
    for key in ("eval.rewards", "gold_rewards"):  # extra columns beside the trained rewards' own
        clash = sorted(set(sections[key]) & set(config["rewards"]))
        if clash:
            raise ConfigError(f"{key}: {', '.join(clash)} already in rewards (names must differ)")
    for key, section in sections.items():
        try:
            rewards.check_options(section or {}, key=key)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    try:  # a remote reward's server answers as configured, before any job starts
        check_remote_rewards(sections)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    for key in ("train", "eval"):
        loaded = prompts.load_prompts(config["prompts"][key], key=f"prompts.{key}")
        for prompt_id, prompt in zip(loaded.prompt_id, loaded.prompt):
            try:
                rewards.check_prompts(config["rewards"], [prompt])
                if config["gold_rewards"]:  # they rescore the rollouts and the eval images
                    rewards.check_prompts(config["gold_rewards"], [prompt])
            except ValueError as exc:
                raise ConfigError(f"prompts.{key} ({config['prompts'][key]}), prompt {prompt_id}: {exc}") from exc
        if key == "train":
            check_shards(config, len(prompts.select_prompts(loaded, config["generate"]["prompts_per_iteration"],
                                                            config["seed"], 0)))
    overlap = prompt_overlap(config) if config["prompts"]["overlap"] == "error" else None
    if overlap:
        raise ConfigError(f"{overlap} (prompts.overlap: error)")
    if config["prompts"]["too_long"] == "error":
        from rewardloop.models.prompt_lengths import long_prompts

        found = long_prompts(config)
        if found:
            raise ConfigError(f"{found[0].key} ({config['prompts'][found[0].key.split('.')[1]]}): prompt "
                              f"{found[0].prompt_id} is {found[0].tokens} tokens for {found[0].tokenizer}, over its "
                              f"limit of {found[0].limit} ({len(found)} over-long in all; prompts.too_long: error)")


def check_input_files(config: Mapping) -> None:
    """Every weights file the run reads from outside results/ (the model, model.init_lora, the rewards'
    checkpoints) is complete and no link dangles (models.weight_files): a broken one would change the
    input's fingerprint and make Snakemake delete finished outputs before a job failed on it."""
    from rewardloop.models.weight_files import check_files

    for key, path in local_inputs(config, ("model", "rewards", "eval", "gold_rewards")).items():
        check_files(path, key)


def startup_warnings(config: Mapping) -> list[str]:
    """What a valid config should still tell the user at startup: eval prompts that are also train
    prompts, prompts a text encoder will cut, half-precision rollouts on the CPU."""
    lines = []
    overlap = prompt_overlap(config) if config["prompts"]["overlap"] == "warn" else None
    if overlap:
        lines.append(f"rewardloop: {overlap} (prompts.overlap: error stops instead)")
    if config["prompts"]["too_long"] == "warn":
        from rewardloop.models.prompt_lengths import long_prompts, warning_lines

        lines.extend(warning_lines(long_prompts(config)))
    half = config["generate"]["precision"]
    if config["device"] == "cpu" and half in ("fp16", "bf16"):
        lines.append(f"rewardloop: generate.precision: {half} with device: cpu: half precision is slower than fp32 on "
                     f"a CPU (the tiny model's rollouts x4.5 in fp16, x3.5 in bf16, measured on 2 cores) and rounds "
                     f"more; fp32 (or auto) is the CPU's precision")
    return lines


def prompt_overlap(config: Mapping) -> str | None:
    """Which eval prompts are also train prompts (so the eval does not hold them out), or None."""
    from rewardloop import prompts

    paths = config["prompts"]
    train, held_out = (prompts.load_prompts(paths[key], key=f"prompts.{key}") for key in ("train", "eval"))
    shared = prompts.shared_prompts(train, held_out)
    if not shared:
        return None
    named = ", ".join(f"{eval_id} (= train {train_id})" for eval_id, train_id in shared[:OVERLAP_IDS])
    more = f" and {len(shared) - OVERLAP_IDS} more" if len(shared) > OVERLAP_IDS else ""
    return (f"prompts.eval ({paths['eval']}): {len(shared)} of its {len(held_out)} prompts are also in prompts.train "
            f"({paths['train']}): {named}{more}; the eval does not hold them out")


def check_existing_iterations(config: Mapping, results: str | Path = "results") -> None:
    """Refuse a run that plans fewer iterations than ``results`` already holds: rule all would leave the
    later ones out, silently orphaned beside a report and summary that no longer match them."""
    from rewardloop.results_layout import RunLayout

    folder = Path(results)
    beyond = [(it, path.name) for it, path in RunLayout(folder).iteration_folders() if it >= config["iterations"]]
    if beyond:
        keep = beyond[-1][0] + 1
        raise ConfigError(f"iterations: {config['iterations']}, but {folder}/ already holds "
                          f"{', '.join(name for _, name in beyond)} of a longer run; set iterations: {keep} to keep "
                          f"them, or move them out of {folder}/")


def check_results_layout(config: Mapping, results: str | Path = "results") -> None:
    """One layout per results folder: a single run's ``iter_XXX/``, or a fan-out's ``<experiment>/seed_<s>/``.
    Planning the other beside what is there would leave ``summary``, ``best`` and ``compare`` reading the old
    layout's runs as if they were this config's."""
    from rewardloop.results_layout import RunLayout

    folder = Path(results)
    single = [path.name for _, path in RunLayout(folder).iteration_folders()]
    fanout = sorted(str(path.relative_to(folder)) for path in folder.glob("*/seed_*") if path.is_dir())
    if config["experiments"] and single:
        raise ConfigError(f"experiments: a fan-out writes {folder}/<experiment>/seed_<s>/, but {folder}/ holds a single "
                          f"run ({', '.join(single)}) that summary, best and compare would read beside it; move "
                          f"{folder}/ aside first (or run the fan-out in another work folder)")
    if not config["experiments"] and fanout:
        raise ConfigError(f"experiments: none, but {folder}/ holds a fan-out's runs ({', '.join(fanout[:4])}"
                          f"{', ...' if len(fanout) > 4 else ''}); a single run would write {folder}/iter_XXX/ beside "
                          f"them: give the config its experiments again, or move {folder}/ aside first")


def check_shards(config: dict, prompts_per_iteration: int) -> None:
    """Every shard of generate/score gets at least one whole batch (see sharding.shard_rows)."""
    from rewardloop.runtime.sharding import ShardError, shard_rows

    samples = prompts_per_iteration * config["generate"]["images_per_prompt"]
    for stage in ("generate", "score"):
        try:
            shard_rows(samples, config[stage]["batch_size"], config[stage]["shards"], 0, key=f"{stage}.shards")
        except ShardError as exc:
            raise ConfigError(str(exc)) from exc


def check_objective(config: dict) -> None:
    """The objective (``train.loss``) fits the model family, the adapter, the processes and the data;
    then its own checks (e.g. GRPO's step strategy)."""
    from rewardloop.models.families import get_family
    from rewardloop.objectives import ObjectiveError, get_objective
    from rewardloop.sampling.schedulers import SamplerError, check_sampler

    train, family = config["train"], config["model"]["family"]
    objective = get_objective(train["loss"])
    name = objective.name
    if not objective.supports(get_family(family)):
        raise ConfigError(f"train.loss: {name} is not available for model.family {family} "
                          f"({name} trains {', '.join(objective.family_names())})")
    if train["adapter"] != "lora" and not objective.full_model:
        raise ConfigError(f"train.adapter: {name} trains a LoRA (its reference is the LoRA disabled); "
                          "set train.adapter: lora")
    processes = train["num_processes"] or 1
    if processes > 1 and not objective.multi_process:
        raise ConfigError(f"train.num_processes: {name} trains in one process (its micro-batches are not "
                          "split over ranks); set train.num_processes: null or 1")
    drawn = config["generate"]["prompts_per_iteration"]  # null: every train prompt (counted by check_shards)
    rollouts = (drawn or processes) * config["generate"]["images_per_prompt"]
    if objective.signal == "advantages" and processes > rollouts:
        raise ConfigError(f"train.num_processes: {processes} processes for {rollouts} samples per iteration "
                          f"(generate.prompts_per_iteration x generate.images_per_prompt): every rank needs at least "
                          "one sample of each batch; use fewer processes or more samples")
    if config["data"]["offline_pairs"] and not objective.offline_pairs:
        raise ConfigError(f"data.offline_pairs: {name} trains on online rollouts' {objective.signal}, not on "
                          "offline pairs; set data.offline_pairs: null")
    try:
        objective.check(config)
    except ObjectiveError as exc:
        raise ConfigError(str(exc)) from exc
    generate = config["generate"]
    try:
        check_sampler(generate["scheduler"], get_family(family).flow_matching, generate["eta"], objective.records_steps)
    except SamplerError as exc:
        raise ConfigError(str(exc)) from exc


def check_distributed(train: Mapping) -> None:
    """``train.distributed: fsdp`` with options its FSDP2 sharding cannot honour (rewardloop.training.fsdp)."""
    if train["distributed"] != "fsdp":
        return
    refused = {
        "train.mixed_precision": (train["mixed_precision"] == "fp16",
                                  "fp16's loss scaler does not unscale sharded gradients; use bf16 or no"),
        "train.optimizer": (train["optimizer"] != "adamw", f"{train['optimizer']} keeps states that are not shaped "
                            "like the sharded weights; use adamw"),
        "train.reference_offload": (train["reference_offload"], "a sharded reference stays sharded on the GPUs "
                                    "(1/N of it each); set train.reference_offload: false"),
    }
    for key, (bad, why) in refused.items():
        if bad:
            raise ConfigError(f"train.distributed: fsdp with {key}: {train[key.split('.')[1]]}: {why}")


def check_train_nodes(config: Mapping, train_resources: Mapping, local_run: bool = False) -> None:
    """A train job over several nodes (set-resources ``train: {nodes: N, ...}``) that the run can place: on a
    cluster, one launcher task per node outside the executor's own srun, and the processes split evenly.
    Whether the jobs run locally is known only once they are about to run (``local_run``, from onstart)."""
    from rewardloop.runtime.resources import train_processes

    nodes = int(train_resources.get("nodes") or 1)
    if nodes == 1:
        return
    where = f"set-resources train: nodes: {nodes}"
    if local_run:
        raise ConfigError(f"{where}: a local run has one node; run it through a SLURM profile "
                          "(--profile profiles/slurm, docs/running-on-slurm.md)")
    processes = train_processes(config["train"], int(train_resources.get("gpu") or 0))
    if processes % nodes:
        raise ConfigError(f"{where}: {processes} training processes (train.num_processes, else the job's gpu "
                          f"resource) do not split evenly over {nodes} nodes; give every node as many GPUs")
    if train_resources.get("tasks") != nodes:
        raise ConfigError(f"{where} needs tasks: {nodes} (one launcher per node; it has "
                          f"{train_resources.get('tasks')})")
    if not train_resources.get("mpi"):
        raise ConfigError(f"{where} needs mpi: srun, so the SLURM executor runs the job's command on the first "
                          "node as it is (not inside its own `srun -n1` step), and the job starts a launcher per node")


def check_guidance_evals(config: Mapping) -> None:
    """``eval.also_at_guidance`` lists only further scales, not the eval's own."""
    main = float(eval_guidance_scale(config))
    if main in guidance_evals(config).values():
        raise ConfigError(f"eval.also_at_guidance: {main:g} is the eval's own CFG scale (eval.guidance_scale, "
                          f"or generate.guidance_scale when that is null): list only further scales")


def refuse_moved_keys(config: Mapping) -> None:
    """Options of one objective moved from ``train`` into its own section: name the new key."""
    from rewardloop.objectives import OBJECTIVES

    train = config.get("train")
    if not isinstance(train, Mapping):
        return
    moved: dict[str, list[str]] = {}
    for name, objective in OBJECTIVES.items():
        for old, new in objective.moved_keys.items():
            moved.setdefault(old, []).append(f"train.{name}.{new}")
    errors = [f"  train.{key}: now {' or '.join(moved[key])} (each objective's options live in its own section)"
              for key in train if key in moved]
    if errors:
        raise ConfigError("invalid config:\n" + "\n".join(errors))
