# Off-policy pairs (data.offline_pairs, Pick-a-Pic layout): resized, cropped, VAE- and text-encoded
# once with the base model's encoders (training never changes them), then read by every train job.


if config["data"]["offline_pairs"]:

    rule encode_offline_pairs:
        input:
            model=BASE_MODEL_INPUT,
            pairs=config["data"]["offline_pairs"],
        output:
            pairs=OFFLINE_PAIRS_FILE,
            latents=OFFLINE_LATENTS_FILE,
        params:
            cfg=stage_config(config, "seed", "model", "data", "device"),
            resolution=config["generate"]["resolution"],
            random_crop=config["train"]["random_crop"],
            num_workers=config["train"]["dataloader_num_workers"],
        log:
            RUN.log(None, "encode_offline_pairs"),
        benchmark:
            RUN.benchmark(None, "encode_offline_pairs")
        threads: config["resources"]["threads"]
        resources:
            **job_resources(config),
        script:
            "../scripts/encode_offline_pairs.py"
