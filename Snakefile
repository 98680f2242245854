# rewardloop: iterative online reward fine-tuning of text-to-image diffusion models.
# Each iteration it: generate -> score -> pairs -> train -> export (= model(it)); eval runs beside.
# Usage: snakemake --cores 2 [--configfile configs/<recipe>.yaml] [--config iterations=5]

from rewardloop.config import validate as validate_config


configfile: f"{workflow.basedir}/config.yaml"


# Schema (defaults filled, unknown keys refused) and file checks, before any job starts.
validate_config(config)


include: "rules/common.smk"
include: "rules/model.smk"
include: "rules/generate.smk"
include: "rules/score.smk"
include: "rules/pairs.smk"
include: "rules/train.smk"
include: "rules/export.smk"
include: "rules/eval.smk"


rule all:
    input:
        all_targets(),
    default_target: True
