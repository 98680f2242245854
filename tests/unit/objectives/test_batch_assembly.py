"""How each objective assembles its updates and micro-batches (no model needed).

These are the promises resume and multi-process training rest on: a micro-batch is a pure function
of (seed, iteration, step, micro); P processes of batch b together draw what one process of batch
P*b draws; every sample is visited once per inner epoch; the shares of empty prompts, flips and
offline pairs are what the config says. At their edges (what `make mutation` found unguarded): a batch of
one, a population exactly the batch's size, an offline share that rounds to none or takes all, purity
when the pairs are drawn with replacement, SDXL's time ids, the message of a missing tensor.
"""

from __future__ import annotations

import pytest
import torch

from meta_device import policy_on
from objective_checks import config, pair_inputs, prompt_embeds, sd15_model_info
from rewardloop.models.families import get_family
from rewardloop.objectives import get_objective
from rewardloop.objectives.preference import PairData, concat_pairs
from rewardloop.objectives.clean_latents import CleanLatentData
from rewardloop.objectives.registry import ModelInfo, ObjectiveError


def pair_objective(iteration: int = 0, seed: int = 0, **train):
    cfg = config("config.yaml", **train)
    objective = get_objective(cfg["train"]["loss"]).from_config({**cfg, "seed": seed}, iteration)
    objective.use_model(sd15_model_info())
    return objective


def pairs(count: int, offline: int = 0, fraction: float = 0.0) -> PairData:
    data = PairData(torch.randn(count, 4, 8, 8), torch.randn(count, 4, 8, 8), torch.randn(count, 16, 64))
    if offline:
        extra = PairData(torch.randn(offline, 4, 8, 8), torch.randn(offline, 4, 8, 8), torch.randn(offline, 16, 64))
        data = concat_pairs(data, extra, fraction)
    return data


def same(a, b) -> bool:
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("index", "noise", "timesteps", "empty_mask",
                                                                     "flip_mask"))


def test_a_pair_micro_batch_is_a_pure_function_of_seed_iteration_step_and_micro():
    data = pairs(40)
    first = pair_objective(batch_size=8).micro_batch(data, 3, 1)
    assert same(first, pair_objective(batch_size=8).micro_batch(data, 3, 1))
    for other in (pair_objective(batch_size=8).micro_batch(data, 4, 1),
                  pair_objective(batch_size=8).micro_batch(data, 3, 0),
                  pair_objective(iteration=1, batch_size=8).micro_batch(data, 3, 1),
                  pair_objective(seed=1, batch_size=8).micro_batch(data, 3, 1)):
        assert not torch.equal(first.noise, other.noise) and not torch.equal(first.index, other.index)
    assert len(first.index) == 8 and len(set(first.index.tolist())) == 8  # without replacement
    assert first.noise.shape == (8, 4, 8, 8) and ((0 <= first.timesteps) & (first.timesteps < 1000)).all()
    small = pair_objective(batch_size=8).micro_batch(pairs(3), 0, 0)  # fewer pairs than the batch
    assert len(small.index) == 8 and set(small.index.tolist()) <= {0, 1, 2}


def test_processes_split_the_global_micro_batch():
    """2 processes of batch b draw, together and in rank order, exactly one process's batch of 2b."""
    data = pairs(40)
    one = pair_objective(batch_size=8).micro_batch(data, 2, 1)
    ranks = [pair_objective(batch_size=4).micro_batch(data, 2, 1, process_index=r, processes=2) for r in (0, 1)]
    for field in ("index", "noise", "timesteps", "empty_mask", "flip_mask"):
        assert torch.equal(torch.cat([getattr(r, field) for r in ranks]), getattr(one, field)), field


def test_empty_prompt_and_flip_shares():
    data = pairs(40)
    plain = [pair_objective(batch_size=16).micro_batch(data, s, 0) for s in range(40)]
    assert not any(b.empty_mask.any() or b.flip_mask.any() for b in plain)
    augmented = [pair_objective(batch_size=16, hflip=True, proportion_empty_prompts=0.2).micro_batch(data, s, 0)
                 for s in range(40)]
    empty = torch.cat([b.empty_mask for b in augmented]).float().mean().item()
    flips = torch.cat([b.flip_mask for b in augmented]).float().mean().item()
    assert empty == pytest.approx(0.2, abs=0.05) and flips == pytest.approx(0.5, abs=0.06)
    # The options do not change the pairs, noise or timesteps drawn.
    assert all(torch.equal(a.noise, b.noise) and torch.equal(a.index, b.index) for a, b in zip(plain, augmented))


@pytest.mark.parametrize("fraction", [0.25, 0.5])
def test_offline_pairs_fill_their_share_of_each_micro_batch(fraction):
    data = pairs(30, offline=10, fraction=fraction)
    for step in range(5):
        batch = pair_objective(batch_size=8).micro_batch(data, step, 0)
        offline = batch.index >= 30
        assert int(offline.sum()) == round(8 * fraction)
        assert (batch.index < 40).all() and len(set(batch.index[offline].tolist())) == int(offline.sum())
    only_offline = pairs(0, offline=10, fraction=fraction)
    assert (pair_objective(batch_size=8).micro_batch(only_offline, 0, 0).index < 10).all()


def test_pair_plan_is_steps_of_accumulated_micro_batches():
    plan = pair_objective(steps=5, gradient_accumulation_steps=3).plan(pairs(10), 1)
    assert plan == [[(s, m) for m in range(3)] for s in range(5)]


def rollouts(count: int, recorded: int):
    from rewardloop.objectives.grpo import RolloutData

    x = torch.zeros(count, recorded, 1)
    return RolloutData(family=None, latents=x, next_latents=x, log_probs=x, params={}, advantages=torch.zeros(count),
                       cond={"prompt_embeds": x}, uncond={}, guidance_scale=1.0)


def visits(plan) -> list[int]:
    return sorted(i for update in plan for index, *_ in update for i in index.tolist())


def test_grpo_plan_visits_every_sample_once_per_inner_epoch_and_every_recorded_step():
    cfg = config("configs/tiny_sd3_grpo.yaml", loss="grpo", batch_size=3, gradient_accumulation_steps=2,
                 grpo={"inner_epochs": 2})
    objective = get_objective("grpo").from_config(cfg, 0)
    plan = objective.plan(rollouts(10, 4), 1)
    # 10 samples in batches of 3 -> 4 batches per epoch, 8 in all, 2 per update; each batch x 4 recorded steps.
    assert len(plan) == 4 and all(len(update) == 2 * 4 for update in plan)
    assert [k for _, k in plan[0]] == [0, 1, 2, 3] * 2
    per_step = [i for update in plan for index, k in update if k == 0 for i in index.tolist()]
    assert sorted(per_step) == sorted(list(range(10)) * 2)
    first_epoch = [i for update in plan[:2] for index, k in update if k == 0 for i in index.tolist()]
    assert sorted(first_epoch) == list(range(10))
    again = get_objective("grpo").from_config(cfg, 0).plan(rollouts(10, 4), 1)
    other = get_objective("grpo").from_config(cfg, 1).plan(rollouts(10, 4), 1)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(plan[0], again[0]))
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(plan[0], other[0]))


def test_nft_plan_trains_each_sample_at_distinct_grid_points_with_fresh_noise():
    cfg = config("configs/tiny_sd3_grpo.yaml", loss="nft", batch_size=4, gradient_accumulation_steps=2,
                 nft={"timestep_fraction": 0.6, "inner_epochs": 2})
    objective = get_objective("nft").from_config(cfg, 0)
    grid = torch.tensor([1.0, 0.9, 0.75, 0.5, 0.3])
    data = CleanLatentData(torch.zeros(10, 1), torch.zeros(10), {"prompt_embeds": torch.zeros(10, 1)}, grid)
    plan = objective.plan(data, 1)
    per_sample = objective.trained_timesteps(data)
    assert per_sample == 3  # int(5 * 0.6)
    # 10 samples in batches of 4: 3 batches per epoch, 6 in all, 2 per update; each batch x 3 grid points.
    assert len(plan) == 3 and all(len(update) == 2 * 3 for update in plan)
    seen: dict[tuple[int, int], list[int]] = {}
    batches = [update[i: i + 3] for update in plan for i in range(0, len(update), 3)]
    for b, micros in enumerate(batches):
        assert all(torch.equal(micros[0][0], m[0]) for m in micros)  # one batch, its grid points in turn
        for index, grid_index, _ in micros:
            for sample, g in zip(index.tolist(), grid_index.tolist()):
                seen.setdefault((b // 3, sample), []).append(g)
    assert sorted(sample for _, sample in seen) == sorted(list(range(10)) * 2)  # every sample once per epoch
    assert all(len(points) == 3 == len(set(points)) and max(points) < 5 for points in seen.values())
    assert any(seen[(0, s)] != seen[(1, s)] for s in range(10))  # a new permutation each inner epoch
    seeds = [seed for update in plan for *_, seed in update]
    assert len(set(seeds)) == len(seeds)  # fresh noise for every (batch, grid point)


def test_offline_pairs_follow_the_online_ones_through_the_objective():
    from objective_checks import pair_inputs, prompt_embeds

    online = pair_inputs(torch.randn(5, 4, 8, 8), torch.randn(5, 4, 8, 8), prompt_embeds(5, 64, 0))
    offline = pair_inputs(torch.randn(3, 4, 8, 8), torch.randn(3, 4, 8, 8), prompt_embeds(3, 64, 1))
    objective = pair_objective()
    data = objective.add_offline(objective.load(online, sd15_model_info()), offline, 0.25)
    assert (len(data), data.online, data.offline, data.offline_fraction) == (8, 5, 3, 0.25)
    assert torch.equal(data.chosen[5], offline.tensors["latents/c0"])
    assert torch.equal(data.rejected[7], offline.tensors["latents/r2"])
    assert torch.equal(data.embeds[6], offline.tensors["prompt_embeds/p1"]) and data.pooled is None
    bigger = pair_inputs(torch.randn(2, 4, 16, 16), torch.randn(2, 4, 16, 16), prompt_embeds(2, 64, 2))
    with pytest.raises(ValueError, match=r"^data\.offline_pairs: latents \(4, 16, 16\) differ from the rollouts' "
                                         r"\(4, 8, 8\)$"):
        objective.add_offline(data, bigger, 0.25)


def test_pooled_conditioning_and_the_empty_prompt_for_sdxl_pairs():
    """SDXL pairs carry pooled embeddings; an empty-prompt row takes both of the empty prompt's tensors."""
    from objective_checks import pair_inputs, prompt_embeds

    inputs = pair_inputs(torch.randn(4, 4, 8, 8), torch.randn(4, 4, 8, 8), prompt_embeds(4, 64, 0))
    pooled = torch.randn(4, 32)
    inputs.tensors.update({f"pooled_embeds/p{i}": pooled[i] for i in range(4)})
    inputs.tensors.update({"empty_prompt/prompt_embeds": torch.zeros(16, 64), "empty_prompt/pooled_embeds": torch.ones(32)})
    objective = pair_objective()
    data = objective.load(inputs, sd15_model_info())
    assert torch.equal(data.pooled, pooled) and set(data.empty) == {"prompt_embeds", "pooled_embeds"}
    cond = data.conditioning(torch.tensor([2, 0]), torch.tensor([False, True]))
    assert torch.equal(cond["pooled_embeds"][0], pooled[2]) and torch.equal(cond["pooled_embeds"][1], torch.ones(32))
    assert torch.equal(cond["prompt_embeds"][1], torch.zeros(16, 64))
    both = concat_pairs(data, data, 0.5)
    assert torch.equal(both.pooled, torch.cat([pooled, pooled])) and both.empty is data.empty
    assert torch.equal(both.rejected[4:], data.rejected) and torch.equal(both.embeds[4:], data.embeds)


def test_missing_inputs_are_named():
    from objective_checks import advantage_table, pair_inputs, prompt_embeds
    from rewardloop.objectives.registry import ObjectiveError, TrainingInputs

    objective = pair_objective()
    empty = pair_inputs(torch.randn(0, 4, 8, 8), torch.randn(0, 4, 8, 8), prompt_embeds(0, 64, 0))
    empty.signal = empty.signal.reindex(columns=["prompt_id", "chosen", "rejected"])
    with pytest.raises(ObjectiveError, match=r"^pairs\.parquet: no preference pairs \(all groups tied\?\)$"):
        objective.load(empty, sd15_model_info())
    data = objective.load(pair_inputs(torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8), prompt_embeds(2, 64, 0)),
                          sd15_model_info())
    with pytest.raises(ObjectiveError, match=r"^train\.proportion_empty_prompts > 0 but the empty prompt's "
                                             r"conditioning is not cached$"):
        data.conditioning(torch.tensor([0]), torch.tensor([True]))
    grpo = get_objective("grpo").from_config(config("configs/tiny_sd3_grpo.yaml", loss="grpo"), 0)
    no_rows = TrainingInputs(advantage_table([]), {}, "advantages.parquet", "latents.safetensors")
    with pytest.raises(ObjectiveError, match=r"^advantages\.parquet: no samples with a non-zero advantage "
                                             r"\(every group tied\?\)$"):
        grpo.load(no_rows, sd15_model_info())
    rows = TrainingInputs(advantage_table([1.0, -1.0]), {}, "advantages.parquet", "latents.safetensors")
    with pytest.raises(ObjectiveError, match=r"^latents\.safetensors: has no tensor 'trajectory/s0/latents' "
                                             r"\(needed by advantages\.parquet; was it generated with train\.loss: grpo "
                                             r"on a sd15 model\?\)$"):
        grpo.load(rows, sd15_model_info())


# --- pair micro-batches at their edges, SDXL's micro-conditioning, a missing tensor -------------------------

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
