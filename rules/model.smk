# The embedded tiny model: built and briefly pretrained once, offline, on synthetic data. A folder that is
# already there with the config's recipe (the shipped resources/models/tiny-sd15, a copy, a restore) is used
# as it is: no build is planned; one built with another recipe is refused, never rebuilt in place
# (src/rewardloop/models/tiny/builds.py).

import sys

from rewardloop.config import ConfigError
from rewardloop.host import cpu_kernels
from rewardloop.models.tiny import builds as tiny_builds


# A fan-out's runs use the model the fan-out builds (rules/experiments.smk includes this file once).
if not SHARED_RESULTS and config["model"]["build_tiny"]:
    TINY_RECIPE = tiny_builds.recipe_record(
        config["model"]["family"], config["tiny"], cpu_kernels.level(config["cpu_kernels"], config["device"]))
    try:
        TINY_EXISTING = tiny_builds.check_existing(config["model"]["path"], TINY_RECIPE)
    except tiny_builds.TinyBuildError as exc:
        raise ConfigError(str(exc)) from None
    if TINY_EXISTING.warning and workflow.is_main_process:
        print(TINY_EXISTING.warning, file=sys.stderr)

    if TINY_EXISTING.build:

        rule build_tiny_model:
            output:
                model=directory(config["model"]["path"]),
            params:
                tiny=config["tiny"],
                family=config["model"]["family"],
            log:
                RUN.log(None, "build_tiny_model"),
            benchmark:
                RUN.benchmark(None, "build_tiny_model")
            threads: config["tiny"]["threads"]
            resources:
                **job_resources(config, gpu=0),
            script:
                "../scripts/build_tiny_model.py"
