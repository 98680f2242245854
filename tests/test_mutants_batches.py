"""Pair micro-batches at their edges and SDXL's micro-conditioning (what `make mutation` found
unguarded): a batch of one, a population exactly the batch's size, an offline share that rounds to
none or takes all, purity when the pairs are drawn with replacement, SDXL's time ids, the message of
a missing tensor. No model is built.
"""

from __future__ import annotations

import pytest
import torch

from meta_device import policy_on
from objective_checks import config, pair_inputs, prompt_embeds, sd15_model_info
from rewardloop.models.families import get_family
from rewardloop.objectives import get_objective
from rewardloop.objectives.registry import ModelInfo, ObjectiveError

from test_batch_assembly import pair_objective, pairs, same


def test_a_batch_of_one_pair():
    batch = pair_objective(batch_size=1).micro_batch(pairs(5), 0, 0)
    assert batch.index.dtype == torch.long and len(batch.index) == 1 and len(batch.noise) == 1


def test_as_many_pairs_as_the_batch_are_each_drawn_once():
    for step in range(5):
        batch = pair_objective(batch_size=8).micro_batch(pairs(8), step, 0)
        assert sorted(batch.index.tolist()) == list(range(8))


@pytest.mark.parametrize("online, fraction, offline_in_batch", [(30, 0.05, 0), (30, 1.0, 8), (0, 0.5, 8)])
def test_an_offline_share_of_none_or_all(online, fraction, offline_in_batch):
    """round(8 x 0.05) = 0 offline pairs; a share of 1, or no online pairs at all: only offline ones."""
    data = pairs(online, offline=8, fraction=fraction)
    for step in range(5):
        batch = pair_objective(batch_size=8).micro_batch(data, step, 0)
        assert batch.index.dtype == torch.long and len(batch.index) == 8
        offline = batch.index[batch.index >= online] - online
        assert len(offline) == offline_in_batch
        if offline_in_batch == 8:  # 8 of 8 offline pairs: each once
            assert sorted(offline.tolist()) == list(range(8))
        if offline_in_batch == 0:
            assert len(set(batch.index.tolist())) == 8


def test_draws_with_replacement_are_pure_functions_of_the_seeds_too():
    """Fewer pairs than the batch (drawn with replacement), online and offline: the global generator plays no part."""
    for data in (pairs(3), pairs(3, offline=2, fraction=0.5)):
        torch.manual_seed(1)
        first = pair_objective(batch_size=8).micro_batch(data, 2, 1)
        torch.manual_seed(2)
        assert same(first, pair_objective(batch_size=8).micro_batch(data, 2, 1))


class Recorder(torch.nn.Module):
    """A stand-in UNet that records its keyword arguments and predicts w * x."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(0.5))
        self.calls = []

    @property
    def dtype(self):
        return self.w.dtype

    def forward(self, x, t, **kwargs):
        self.calls.append(kwargs)
        return type("Output", (), {"sample": self.w * x})()


def test_sdxl_pairs_are_conditioned_on_their_pixel_size():
    """SDXL's micro-conditioning (Podell et al. 2023): time ids (original h, w, crop top, left, target h, w) =
    (64, 64, 0, 0, 64, 64) for 8 x 8 latents of a VAE that downsamples 8 times, with the pooled embeddings."""
    inputs = pair_inputs(torch.randn(4, 4, 8, 8), torch.randn(4, 4, 8, 8), prompt_embeds(4, 64, 0))
    pooled = torch.randn(4, 32)
    inputs.tensors.update({f"pooled_embeds/p{i}": pooled[i] for i in range(4)})
    objective = get_objective("sft").from_config(config("config.yaml", loss="sft", batch_size=2), 0)
    data = objective.load(inputs, ModelInfo(get_family("sdxl"), sd15_model_info().scheduler_config, 8))
    unet = Recorder()
    objective.loss(policy_on("cpu", unet), data, (0, 0))
    (kwargs,) = unet.calls
    index = objective.micro_batch(data, 0, 0).index
    assert torch.equal(kwargs["added_cond_kwargs"]["text_embeds"], pooled[index])
    assert kwargs["added_cond_kwargs"]["time_ids"].tolist() == [[64, 64, 0, 0, 64, 64]] * 2


def test_a_missing_tensor_is_named_with_the_table_that_needs_it():
    inputs = pair_inputs(torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8), prompt_embeds(2, 64, 0))
    del inputs.tensors["latents/r1"]
    with pytest.raises(ObjectiveError, match=r"^latents\.safetensors: has no tensor 'latents/r1' "
                                             r"\(needed by pairs\.parquet\)$"):
        pair_objective().load(inputs, sd15_model_info())
