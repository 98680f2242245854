"""Library warnings that are noise for this workflow, each silenced where it is raised, all listed here.

A filter names the library's logger that says it (its exact name: a filter on a logger sees only the
records of that logger, so nothing else of the library is touched), the level, and a regular
expression the message must match from its start; a comment says why the message is noise here.
Anything a library says that no filter matches still reaches the job's log. A warning raised with
``warnings.warn`` would be listed the same way, by its category and message (none is, today: the
default loop's jobs raise none).

Collected from the default loop's terminal and job logs (``results/logs/**``): the only library
warnings there were the ones below, one per LoRA load (every generate, eval and train job after
iteration 0).

:func:`install` runs where every job starts (``runtime.snakemake_job.job``) and where a pipeline is
loaded (``models.loading.load_pipeline``, so also in `accelerate launch`-ed training ranks and the
command-line tools); installing twice changes nothing.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class LogNoise:
    """A message of one library logger at one level that means nothing for this workflow."""

    logger: str  # the logger that emits it, exactly (logging.getLogger(__name__) in the library)
    level: int
    pattern: str  # re.match against the formatted message

    def filter(self, record: logging.LogRecord) -> bool:
        """logging's filter protocol: False drops the record."""
        return not (record.levelno == self.level and re.match(self.pattern, record.getMessage()))


LOG_NOISE = (
    # Our LoRAs adapt the denoiser only (models/lora.py: the UNet or the transformer), never a text
    # encoder, so every load_lora_weights finds no text-encoder keys and diffusers says so (and asks
    # for an issue) once per text encoder; "NoneType" when the pipeline was loaded without text
    # encoders (training's reference). Whether the denoiser's layers all landed is checked by
    # models.lora.load_lora_fused, which raises otherwise. A missing denoiser prefix is not matched.
    LogNoise("diffusers.loaders.lora_base", logging.WARNING,
             r"No LoRA keys associated to \w+ found with the prefix='text_encoder(_[23])?'\."),
)


def install() -> None:
    """Attach every filter to its logger (idempotent: a filter already there is not added again)."""
    for noise in LOG_NOISE:
        logger = logging.getLogger(noise.logger)
        if noise not in logger.filters:
            logger.addFilter(noise)
