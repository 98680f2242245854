"""Each objective moves the model the right way on held-out data, in seconds.

Training goes through the real objective (its ``load`` of the stage's tables and tensors, ``plan``,
``loss``) and the real Trainer with a peft LoRA, on a tiny random-init denoiser; the signal is
synthetic with a known right direction (objective_inputs.py, on objective_checks.py's formulas).
Every test also trains on the reversed signal (``direction = -1``: chosen and rejected swapped, or
the advantages' sign flipped) and expects the opposite movement, so the measure cannot pass whatever
the training does.
"""

from __future__ import annotations

import pytest

from objective_checks import (SD3, config, denoising_errors, pair_inputs, prompt_embeds, sd15_model_info,
                              style_latents, tiny_unet, train)
from objective_inputs import (BAD, GOOD, SD15_LATENT, CPSStep, DDIMStep, FlowStep, MixGRPOStep,
                              held_out_flow_matching_shift, held_out_lean, nft_inputs, rollout_inputs)


# --- DPO and SFT: held-out chosen images become easier to denoise than rejected ones ----------

def held_out_preference(unet, before: tuple) -> float:
    """How much more the held-out chosen-style error fell than the rejected-style error (< 0: towards chosen)."""
    good, bad, embeds = held_out_pairs()
    after = denoising_errors(unet, good, embeds), denoising_errors(unet, bad, embeds)
    return float((after[0] - before[0]).mean() - (after[1] - before[1]).mean())


def held_out_pairs():
    return (style_latents(GOOD, 16, SD15_LATENT, seed=90), style_latents(BAD, 16, SD15_LATENT, seed=91),
            prompt_embeds(16, 64, seed=92))


@pytest.mark.parametrize("direction", [1, -1])
@pytest.mark.parametrize("loss, options", [
    ("dpo", {"dpo": {"beta": 2000, "reference": "base"}}),
    ("sft", {}),
])
def test_pair_objectives_move_towards_the_chosen_images(tmp_path, loss, options, direction):
    unet = tiny_unet()
    good, bad, embeds = held_out_pairs()
    before = denoising_errors(unet, good, embeds), denoising_errors(unet, bad, embeds)
    train_good, train_bad = style_latents(GOOD, 24, SD15_LATENT, seed=1), style_latents(BAD, 24, SD15_LATENT, seed=2)
    chosen, rejected = (train_good, train_bad) if direction == 1 else (train_bad, train_good)
    inputs = pair_inputs(chosen, rejected, prompt_embeds(24, 64, seed=3))
    cfg = config("config.yaml", loss=loss, steps=40, batch_size=8, learning_rate=5e-3, **options)
    trained = train(cfg, unet, inputs, sd15_model_info(), tmp_path)
    moved = held_out_preference(trained, before)
    assert moved * direction < 0, moved


# --- Flow-GRPO (SD3 flow SDE, SD1.5 DDIM with eta) and MixGRPO: held-out high-advantage transitions gain likelihood

@pytest.mark.parametrize("direction", [1, -1])
@pytest.mark.parametrize("step", [FlowStep(), CPSStep(), DDIMStep(), MixGRPOStep()],
                         ids=["sd3-flow-sde", "sd3-cps", "sd15-ddim", "sd3-mixgrpo"])
def test_grpo_raises_the_likelihood_of_high_advantage_transitions(tmp_path, step, direction):
    base = step.denoiser()
    leans = [1, -1] * 8
    inputs = rollout_inputs(step, base, leans, [direction * lean for lean in leans], seed=10)
    trained = train(step.config(), step.denoiser(), inputs, step.model_info(), tmp_path)
    lean = held_out_lean(step, base, trained)
    assert lean * direction > 0, lean


# --- DiffusionNFT: held-out high-advantage images become easier to generate (flow-matching error)

@pytest.mark.parametrize("direction", [1, -1])
def test_nft_lowers_the_flow_matching_error_of_high_advantage_images(tmp_path, direction):
    cfg = config("configs/tiny_sd3_grpo.yaml", loss="nft", batch_size=4, learning_rate=3e-3,
                 gradient_accumulation_steps=1, nft={"inner_epochs": 2})
    trained = train(cfg, SD3.denoiser(), nft_inputs(direction, seed=20), FlowStep().model_info(), tmp_path)
    moved = held_out_flow_matching_shift(trained)
    assert moved * direction < 0, moved
