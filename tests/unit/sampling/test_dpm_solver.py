"""MixGRPO-Flash's tail (src/rewardloop/sampling/dpm_solver.py): the compressed grid against the values the
reference's formulas give (Tencent-Hunyuan/MixGRPO sampling_utils.py:33-59, computed by hand for its scripts'
25 steps at shift 3), DPM-Solver++(2M, midpoint) against diffusers' DPMSolverMultistepScheduler in fp64, and a
Flash rollout of the tiny SD3: the window as MixGRPO's, fewer denoiser calls after it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from objective_checks import tiny_sd3_pipeline
from rewardloop.models.families import get_family
from rewardloop.sampling.ddim import SamplerSettings
from rewardloop.sampling.dpm_solver import compressed_grid, dpm_solver_pp_step, tail_points
from rewardloop.sampling.flow import sample_flow
from rewardloop.sampling.schedulers import shifted_sigmas


def reference_shift(unshifted) -> torch.Tensor:
    """sd3_time_shift at shift 3 (the reference's samp:9-10), then the final 0 a flow scheduler appends."""
    t = torch.as_tensor(np.asarray(unshifted), dtype=torch.float64)
    return torch.cat([3 * t / (1 + 2 * t), torch.zeros(1, dtype=torch.float64)])


FULL = reference_shift(np.linspace(1, 0, 26)[:-1])  # the reference's 25-step grid


@pytest.mark.parametrize(("last", "ratio", "tail"), [
    (3, 0.4, [.94030, .88525, .81818, .73469, .62791, .48649, .29032, 0]),  # Flash, window [0, 4): NFE 11
    (3, 0.2, [.94030, .79245, .53846, 0]),  # Flash*, the frozen window [0, 4): NFE 7
    (17, 0.4, [.53846, .32812, 0]),  # Flash, window [14, 18)
    (21, 0.4, [.29032, 0]),  # the reference's K = 1 would stop at shift(p) = .29032, undenoised: here 2 points
])
def test_the_compressed_tail_is_the_references(last, ratio, tail):
    grid = compressed_grid(FULL, last, ratio, reference_shift)
    assert torch.equal(grid[: last + 1], FULL[: last + 1])  # the steps up to the window's end are kept
    assert grid[last + 1:].tolist() == pytest.approx(tail, abs=5e-6)
    assert len(grid) - 1 == last + tail_points(25, last, ratio)  # the denoiser calls: L + K


def test_the_schedulers_shift_gives_the_same_tail_as_the_reference_formula():
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    ours = compressed_grid(FULL.float(), 3, 0.4, lambda u: shifted_sigmas(scheduler, u, 1024))
    assert ours[4:].tolist() == pytest.approx(compressed_grid(FULL, 3, 0.4, reference_shift)[4:].tolist(), abs=1e-6)
    before = scheduler.sigmas.clone()
    shifted_sigmas(scheduler, np.linspace(0.5, 0, 4)[:-1], 1024)
    assert torch.equal(scheduler.sigmas, before)  # the rollout's scheduler is left as it was


@torch.no_grad()
def test_dpm_solver_pp_2m_midpoint_equals_diffusers_scheduler_in_fp64():
    """The tail stepped by our function and by diffusers' DPM-Solver++ (flow sigmas, flow prediction, midpoint,
    lower order into sigma 0) from the same history: the window's last x0 seeds the second order."""
    from diffusers import DPMSolverMultistepScheduler

    torch.manual_seed(0)
    grid = compressed_grid(FULL, 3, 0.4, reference_shift)  # steps 4 .. 10 are the tail's
    weight = torch.randn(8, 8, dtype=torch.float64) * 0.3

    def velocity(x, sigma):  # a fixed, sigma-dependent field standing in for the denoiser
        return x @ weight * (1 + sigma) - x * sigma

    scheduler = DPMSolverMultistepScheduler(algorithm_type="dpmsolver++", solver_order=2, solver_type="midpoint",
                                            prediction_type="flow_prediction", use_flow_sigmas=True,
                                            final_sigmas_type="zero", lower_order_final=True)
    scheduler.sigmas = grid.clone()
    scheduler.timesteps = grid[:-1] * 1000
    scheduler.num_inference_steps = len(grid) - 1
    x = torch.randn(2, 8, 8, dtype=torch.float64)
    window_x0 = x - float(grid[3]) * velocity(x, float(grid[3]))  # the history: step 3's prediction
    scheduler.model_outputs = [None, window_x0]
    scheduler.lower_order_nums = 1
    scheduler._step_index = 4
    ours, theirs, x0_prev, sigma_prev = x.clone(), x.clone(), window_x0, float(grid[3])
    for j in range(4, len(grid) - 1):
        sigma = float(grid[j])
        theirs = scheduler.step(velocity(theirs, sigma), scheduler.timesteps[j], theirs).prev_sample
        x0 = ours - sigma * velocity(ours, sigma)
        ours = dpm_solver_pp_step(ours, x0, sigma, float(grid[j + 1]), x0_prev, sigma_prev)
        x0_prev, sigma_prev = x0, sigma
        # (diffusers' step upcasts the sample to fp32, whatever its dtype: fp32 rounding, not fp64's)
        torch.testing.assert_close(ours, theirs, rtol=2e-6, atol=2e-6)
    # and it is not Euler: the second-order term moved the result by a thousand times that
    euler = x.clone()
    for j in range(4, len(grid) - 1):
        euler = euler + (float(grid[j + 1]) - float(grid[j])) * velocity(euler, float(grid[j]))
    assert (euler - ours).abs().max() > 1e-3


@torch.no_grad()
def test_a_flash_rollout_keeps_mixgrpos_window_and_calls_the_denoiser_fewer_times(tmp_path):
    pipe = tiny_sd3_pipeline(tmp_path)
    family = get_family("sd3")
    settings = SamplerSettings(steps=10, guidance_scale=1.0, eta=0.0, resolution=32)
    cond = family.encode(pipe, ["a red circle", "a blue square"])
    window = [[1, 2, 3]] * 2
    calls = []
    forward = pipe.transformer.forward
    pipe.transformer.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    euler, euler_records = sample_flow(pipe, family, cond, [5, 6], settings, 2, window, 0.7, progress=False)
    euler_calls, calls[:] = len(calls), []
    flash, flash_records = sample_flow(pipe, family, cond, [5, 6], settings, 2, window, 0.7, progress=False,
                                       dpm_tail_ratio=0.4)
    assert euler_calls == 10 and len(calls) == 3 + tail_points(10, 3, 0.4) == 5
    for ours, mix in zip(flash_records, euler_records):  # the window's steps, recorded for training, are the same
        assert ours.keys() == mix.keys() and all(torch.equal(ours[k], mix[k]) for k in ours)
    assert torch.isfinite(flash).all() and not torch.equal(flash, euler)
    with pytest.raises(ValueError, match="must share their SDE steps"):
        sample_flow(pipe, family, cond, [5, 6], settings, 2, [[1, 2], [2, 3]], 0.7, progress=False,
                    dpm_tail_ratio=0.4)


def test_flash_needs_the_shared_sliding_window_and_a_ratio_needs_flash():
    from objective_checks import config

    from rewardloop.config import ConfigError

    flash = {"strategy": "mixgrpo_window", "num_sde_steps": 4, "ode_after_window": "dpmsolver++", "compress_ratio": 0.2}
    cfg = config("configs/tiny_sd3_mixgrpo.yaml", {"generate": {"sde": flash}})
    assert cfg["generate"]["sde"]["compress_ratio"] == 0.2
    with pytest.raises(ConfigError, match=r"generate.sde.ode_after_window: dpmsolver\+\+ is MixGRPO-Flash's ODE after "
                                          r"its sliding window, .* set generate.sde.strategy: mixgrpo_window \(not sde_window\)"):
        config("configs/tiny_sd3_grpo.yaml", {"generate": {"sde": {"ode_after_window": "dpmsolver++"}}})
    with pytest.raises(ConfigError, match=r"generate.sde.compress_ratio: .* with euler it would do nothing"):
        config("configs/tiny_sd3_mixgrpo.yaml", {"generate": {"sde": {"compress_ratio": 0.4}}})
    with pytest.raises(ConfigError, match=r"generate.sde.compress_ratio: 1.5 is greater than the maximum of 1"):
        config("configs/tiny_sd3_mixgrpo.yaml", {"generate": {"sde": {**flash, "compress_ratio": 1.5}}})
