# The embedded tiny model: built and briefly pretrained once, offline, on synthetic data.


# A fan-out's runs use the model the fan-out builds (rules/experiments.smk includes this file once).
if not SHARED_RESULTS:

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
            **job_resources(gpu=0),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/build_tiny_model.py"
