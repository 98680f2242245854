"""host/library_noise: diffusers' "no text-encoder keys" warning is dropped at its logger, in-process
and in a job's log, while every other warning of the same logger, of the library and of ``warnings``
still comes through."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

from rewardloop.host import library_noise

LORA_LOGGER = "diffusers.loaders.lora_base"
NO_KEYS = "No LoRA keys associated to"


@pytest.fixture
def diffusers_records():
    """The records that reach diffusers' library logger (which does not propagate to the root one),
    with no noise filter installed before the test, nor left after it."""
    import diffusers  # noqa: F401 - configures the library's root logger

    def remove_filters():
        for noise in library_noise.LOG_NOISE:
            logging.getLogger(noise.logger).removeFilter(noise)

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    library_root = logging.getLogger("diffusers")
    remove_filters()
    library_root.addHandler(handler)
    yield records
    library_root.removeHandler(handler)
    remove_filters()


def load_denoiser_only_lora(text_encoder, prefix: str) -> None:
    """What load_lora_weights does with our LoRA file for each text encoder: no key has its prefix."""
    from diffusers import StableDiffusionPipeline

    StableDiffusionPipeline.load_lora_into_text_encoder({"unet.down.lora_A.weight": None}, None, text_encoder,
                                                        prefix=prefix)


def tiny_clip_text_model():
    from transformers import CLIPTextConfig, CLIPTextModel

    return CLIPTextModel(CLIPTextConfig(hidden_size=8, intermediate_size=8, num_attention_heads=2,
                                        num_hidden_layers=1, vocab_size=16, max_position_embeddings=8,
                                        bos_token_id=0, eos_token_id=1, pad_token_id=1))


def test_diffusers_says_it_without_the_filter_and_not_with_it(diffusers_records):
    load_denoiser_only_lora(None, "text_encoder")
    assert [r.name for r in diffusers_records] == [LORA_LOGGER]
    assert diffusers_records[0].getMessage().startswith(f"{NO_KEYS} NoneType found with the prefix='text_encoder'")

    diffusers_records.clear()
    library_noise.install()
    library_noise.install()  # twice: still one filter
    assert logging.getLogger(LORA_LOGGER).filters.count(library_noise.LOG_NOISE[0]) == 1
    load_denoiser_only_lora(None, "text_encoder")  # training's reference pipeline has no text encoder
    load_denoiser_only_lora(tiny_clip_text_model(), "text_encoder_2")  # SDXL's second encoder
    assert diffusers_records == []

    unrelated = ["an unrelated warning of the same logger",
                 f"{NO_KEYS} UNet2DConditionModel found with the prefix='unet'."]
    logging.getLogger(LORA_LOGGER).warning(unrelated[0])
    logging.getLogger("diffusers.loaders.peft").warning(unrelated[1])  # a denoiser without keys is no noise
    assert [r.getMessage() for r in diffusers_records] == unrelated


@pytest.mark.parametrize("message, dropped", [
    (f"{NO_KEYS} CLIPTextModel found with the prefix='text_encoder'. This is safe to ignore", True),
    (f"{NO_KEYS} T5EncoderModel found with the prefix='text_encoder_3'. This is safe to ignore", True),
    (f"{NO_KEYS} UNet2DConditionModel found with the prefix='unet'. This is safe to ignore", False),  # the denoiser
    (f"{NO_KEYS} CLIPTextModel found with the prefix='text_encoder_lora'.", False),
    (f"Loading text_encoder. {NO_KEYS} CLIPTextModel found with the prefix='text_encoder'.", False),  # not at the start
])
def test_the_pattern_matches_only_text_encoder_prefixes_at_the_message_start(message, dropped):
    noise = library_noise.LOG_NOISE[0]
    record = logging.LogRecord(noise.logger, logging.WARNING, __file__, 1, message, None, None)
    assert noise.filter(record) is not dropped
    record.levelno = logging.ERROR  # another level of the same text is not this filter's
    assert noise.filter(record) is True


JOB_SCRIPT = """
import logging, sys, warnings
from types import SimpleNamespace

from rewardloop.runtime.snakemake_job import job

with job(SimpleNamespace(log=[sys.argv[1]], resources=SimpleNamespace(), rule="probe")):
    from diffusers import StableDiffusionPipeline

    StableDiffusionPipeline.load_lora_into_text_encoder({"unet.down.lora_A.weight": None}, None, None,
                                                        prefix="text_encoder")
    logging.getLogger("diffusers.loaders.lora_base").warning("an unrelated diffusers warning")
    warnings.warn("an unrelated library warning", UserWarning)
"""


def test_a_job_log_keeps_every_warning_but_the_noise(tmp_path):
    """A stage script's process (as Snakemake starts one, without warm start): job() installs the filters."""
    log = tmp_path / "probe.log"
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(JOB_SCRIPT))
    result = subprocess.run([sys.executable, str(script), str(log)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = log.read_text()
    assert "an unrelated diffusers warning" in text
    assert "UserWarning: an unrelated library warning" in text
    assert NO_KEYS not in text + result.stderr + result.stdout
