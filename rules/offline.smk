# Off-policy pairs (data.offline_pairs, Pick-a-Pic layout): resized, cropped, VAE- and text-encoded
# once with the base model's encoders (training never changes them), then read by every train job.


if config["data"]["offline_pairs"]:

    rule encode_offline_pairs:
        input:
            model=BASE_MODEL_INPUT,
            pairs=config["data"]["offline_pairs"],
        output:
            pairs=f"{OFFLINE_DIR}/pairs.parquet",
            latents=f"{OFFLINE_DIR}/latents.safetensors",
        params:
            cfg=stage_config(config, "seed", "model", "data", "device"),
            resolution=config["generate"]["resolution"],
            random_crop=config["train"]["random_crop"],
            num_workers=config["train"]["dataloader_num_workers"],
        log:
            f"{RESULTS}/logs/encode_offline_pairs.log",
        benchmark:
            f"{RESULTS}/benchmarks/encode_offline_pairs.tsv"
        threads: config["resources"]["threads"]
        resources:
            **job_resources(),
        conda:
            "../envs/rewardloop.yaml"
        script:
            "../scripts/encode_offline_pairs.py"
