# One run's DAG: every iteration's stages, the evals, the report's figures and the MLflow tracking,
# written under RESULTS (rules/common.smk). The Snakefile includes it for a single run; an experiments
# fan-out (rules/experiments.smk) uses it as a module per variant × seed.


include: "common.smk"
include: "model.smk"
include: "generate.smk"
include: "score.smk"
include: "pairs.smk"
include: "offline.smk"
include: "advantages.smk"
include: "preflight.smk"
include: "train.smk"
include: "export.smk"
include: "base.smk"
include: "eval.smk"
include: "report.smk"
include: "tracking.smk"
include: "monitors.smk"


# A fan-out's run: what the fan-out's rule all asks of it (a single run's rule all is the Snakefile's).
if SHARED_RESULTS:

    rule targets:
        input:
            all_targets(),
