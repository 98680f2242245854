"""MixGRPO-Flash's ODE after the SDE window: DPM-Solver++(2M, midpoint) on a compressed tail of the sigma grid.

As Tencent-Hunyuan/MixGRPO's ``fastvideo/utils/sampling_utils.py`` (``run_sample_step`` with
``dpm_algorithm_type dpmsolver++``, ``dpm_apply_strategy post``, ``dpm_solver_order 2``, ``dpm_solver_type
midpoint``; its free functions ``dpm_step`` and helpers, not the copied diffusers scheduler, which nothing
imports):

- **The tail** (samp:33-59). With L the window's last step of a T-step grid and r the compress ratio,
  K = int(max((T - L) r, 1)) points shift(linspace(p, 0, K)), p = 1 - (L + 1) / T the unshifted position of
  sigma_{L+1}, replace sigma_{L+1} .. sigma_T: the K - 1 steps after the window stand for the T - L - 1 of the
  full grid. Steps 0 .. L are unchanged (Euler before the window, the SDE inside it).
- **The solver** (samp:387-644). Data prediction x0 = x - sigma v; alpha = 1 - sigma, lambda = log alpha -
  log sigma; from s0 = sigma_j to t = sigma_{j+1}, h = lambda_t - lambda_s0:
  first order x' = (sigma_t / sigma_s0) x - alpha_t (e^-h - 1) x0 (the Euler step, for flow sigmas);
  midpoint second order adds - 0.5 alpha_t (e^-h - 1) D1, D1 = (x0 - x0_prev) / r0, r0 = h0 / h,
  h0 = lambda_s0 - lambda_s1, where x0_prev is the prediction of the step before (sigma_s1 = sigma_{j-1}),
  the window's last for the first tail step: the history is warm, so every tail step is second order but
  the last one (into sigma 0), which is first order and returns x0.

Departure, named in docs/flow-rl.md: the reference's K = 1 (when (T - L) r < 2) keeps the single point
shift(p) > 0 and ends the rollout there, undenoised; here the tail has at least 2 points, so every rollout
ends at sigma 0. (Its scripts' 300 iterations never reach such a window on their 25 steps.)
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from rewardloop.lazy_torch import torch

DEFAULT_COMPRESS_RATIO = 0.4  # generate.sde.compress_ratio when absent: the Flash script's dpm_post_compress_ratio


def tail_points(num_steps: int, last_window_step: int, compress_ratio: float) -> int:
    """K, the points of the compressed tail (the reference's int(max((T - L) r, 1)), here at least 2)."""
    return max(int(max((num_steps - last_window_step) * compress_ratio, 1)), 2)


def compressed_grid(sigmas: torch.Tensor, last_window_step: int, compress_ratio: float,
                    shift: Callable[[np.ndarray], torch.Tensor]) -> torch.Tensor:
    """The rollout's grid with the steps after the window compressed: ``sigmas[:L + 2]`` then the tail's
    points after sigma_{L+1}, ending at 0. ``sigmas``: the full grid (T + 1 values, ending at 0); ``shift``:
    the family's shift of unshifted positions (its scheduler's), returning the shifted values and a final 0."""
    num_steps = len(sigmas) - 1
    points = tail_points(num_steps, last_window_step, compress_ratio)
    if last_window_step + 1 >= num_steps:  # the window reaches the end: nothing to compress
        return sigmas.clone()
    start = 1 - (last_window_step + 1) / num_steps
    tail = shift(np.linspace(start, 0, points)[:-1])  # K - 1 shifted points and the scheduler's final 0
    # Point 0 of the tail is sigma_{L+1} itself, where the window's last SDE step ended (the reference's grid is
    # linspace(1, 0, T + 1) shifted, so its tail starts there exactly; a grid of another spacing, SD3's, nearly).
    return torch.cat([sigmas[: last_window_step + 2], tail[1:].to(sigmas.dtype)])


def _log_snr(sigma: float) -> float:
    """lambda = log(1 - sigma) - log(sigma), +-inf at the ends."""
    if sigma <= 0:
        return math.inf
    if sigma >= 1:
        return -math.inf
    return math.log(1 - sigma) - math.log(sigma)


def dpm_solver_pp_step(sample: torch.Tensor, x0: torch.Tensor, sigma: float, sigma_next: float,
                       x0_prev: torch.Tensor | None = None, sigma_prev: float | None = None) -> torch.Tensor:
    """One DPM-Solver++ step from ``sigma`` to ``sigma_next`` given the data prediction ``x0`` at ``sample``:
    second order (midpoint) with the step before's prediction ``x0_prev`` at ``sigma_prev``, first order
    without it or into sigma 0."""
    if sigma_next <= 0:
        return x0.clone()
    alpha_next = 1 - sigma_next
    h = _log_snr(sigma_next) - _log_snr(sigma)
    factor = alpha_next * math.expm1(-h)  # alpha_t (e^-h - 1)
    out = (sigma_next / sigma) * sample - factor * x0
    if x0_prev is not None:
        h_prev = _log_snr(sigma) - _log_snr(sigma_prev)
        if math.isfinite(h_prev):  # (sigma_prev = 1: lambda -inf, r0 infinite, D1 = 0, as in the reference)
            out = out - 0.5 * factor * (x0 - x0_prev) * (h / h_prev)
    return out
