"""MixGRPO (Li et al. 2025, "MixGRPO: Unlocking Flow-based GRPO Efficiency with Mixed ODE-SDE", arXiv 2507.21802;
reference code Tencent-Hunyuan/MixGRPO, ``fastvideo/train_grpo_flux.py``, ``fastvideo/utils/grpo_states.py``,
``fastvideo/utils/sampling_utils.py``, scripts ``finetune_flux_grpo_MixGRPO*.sh``): Flow-GRPO's clipped objective on
the steps of an SDE window that slides over the denoising steps as training goes on, the rollouts' other steps ODE.

What it is here, each choice traced to the reference:
- **Rollouts**: SDE steps only inside the window, ``generate.sde.strategy: mixgrpo_window``
  (sampling/step_strategies.py, a transcription of ``GRPOTrainingStates`` with sample_strategy progressive,
  prog_overlap and roll_back): the same ``num_sde_steps`` (group_size 4) steps for every sample, starting at
  ``window_stride`` (prog_overlap_step 1) x (iteration // ``iters_per_window`` (iters_per_group 25)), the window
  ending before step ``steps - 2`` (max_timesteps = sampling_steps - 2). The SDE is Flow-GRPO's (``flow_grpo_step``:
  std_t = a sqrt(sigma / (1 - sigma)) with sigma_1 for sigma = 1 at the first step, a = eta 0.7; the Gaussian
  log-prob averaged over the latent's elements), which is ``generate.sde.type: flow_grpo``; every other step is
  Euler (``flow_grpo_step`` with determistic), as our ODE steps are.
- **Training**: every sample on every step of its window (``train_timesteps`` = the window), PPO's clipped ratio
  at clip_range 1e-4 and advantages clamped to +-5 (adv_clip_max): GRPO's loss (objectives/grpo.py).
- **No reference model**: the scripts set kl_coeff 0.0 (their "KL" is a squared log-ratio to the sampling policy,
  at weight 0), so ``kl_beta`` defaults to 0 here; a positive one adds GRPO's KL to the LoRA-free model.
Departures, each said in docs/flow-rl.md:
- the window rolls back before the position whose window would be empty (the reference's cycle of
  floor(M / stride) + 1 starts reaches start M = steps - 2, where nothing is recorded or trained); the
  reference's scripts stop at 300 iterations, before it (at 25 iterations a move, 23 moves);
- advantages are GRPO's (the weighted sum of the rewards normalised per group, population std + 1e-4), where the
  reference normalises each reward model per group with the sample std + 1e-8 and sums them weighted; with one
  reward the two differ by the factor sqrt((n - 1) / n) on every advantage;
- the model is handed the scheduler's timestep (the diffusers pipeline's), not the reference's int(1000 sigma) / 1000.
**Flash** (``finetune_flux_grpo_MixGRPO_Flash.sh``, Flash* ``..._Flash*.sh``) is a configuration of the same code:
``generate.sde.ode_after_window: dpmsolver++`` makes the steps after the window DPM-Solver++(2M, midpoint) steps on
the grid's tail compressed by ``compress_ratio`` (0.4; Flash* 0.2, with ``window_stride: 0``), the steps before it
Euler, as the reference's ``dpm_apply_strategy post`` (sampling/dpm_solver.py; the training is unchanged: only
the window is recorded and trained), with ``iters_per_window`` 20.
"""

from __future__ import annotations

from dataclasses import dataclass

from rewardloop.objectives.grpo import GRPO, GRPOOptions
from rewardloop.objectives.options import option
from rewardloop.objectives.registry import ObjectiveError, objective


@dataclass(frozen=True)
class MixGRPOOptions(GRPOOptions):
    kl_beta: float = option(0.0, "Weight of the KL to the reference, the denoiser with the LoRA disabled (MixGRPO's "
                                 "scripts: kl_coeff 0.0, no reference model).", minimum=0)


@objective("mixgrpo")
class MixGRPO(GRPO):
    Options = MixGRPOOptions
    description = ("MixGRPO: Flow-GRPO's loss on the steps of an SDE window that slides over the denoising steps "
                   "(generate.sde.strategy mixgrpo_window), ODE elsewhere.")
    needs = frozenset({"recorded_steps", "flow_matching"})
    moved_keys = {}

    @classmethod
    def check(cls, config) -> None:
        sde = config["generate"]["sde"]
        if sde["strategy"] != "mixgrpo_window":
            raise ObjectiveError(f"generate.sde.strategy: {sde['strategy']}, but train.loss mixgrpo samples SDE "
                                 "steps in its sliding window: set it to mixgrpo_window (with iters_per_window, "
                                 "window_stride, num_sde_steps as the window's size)")
        if sde.get("type", "flow_grpo") != "flow_grpo":
            raise ObjectiveError(f"generate.sde.type: {sde['type']}, but MixGRPO's SDE steps are Flow-GRPO's: "
                                 "set it to flow_grpo")
        super().check(config)

