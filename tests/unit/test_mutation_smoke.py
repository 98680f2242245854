"""A smoke of the mutation run (`make mutation`, docs/development.md): named bugs that once passed
the whole suite, or would ruin a run silently, must each fail the tests named beside them.

Each mutant is applied to a copy of the package (the snippet must occur exactly once, so a
refactor that moves it fails here loudly instead of testing nothing) and the named tests run
against the copy in a fresh interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from workflow_helpers import ROOT


# (name, file under src/rewardloop, original snippet, mutated snippet, tests that must fail)
MUTANTS = [
    ("pairs loaded with chosen and rejected swapped", "objectives/preference.py",
     'chosen=torch.stack([get(f"latents/{s}") for s in pairs.chosen]),\n'
     '        rejected=torch.stack([get(f"latents/{s}") for s in pairs.rejected]),',
     'chosen=torch.stack([get(f"latents/{s}") for s in pairs.rejected]),\n'
     '        rejected=torch.stack([get(f"latents/{s}") for s in pairs.chosen]),',
     ["tests/unit/objectives/test_objective_direction.py::test_pair_objectives_move_towards_the_chosen_images"]),
    ("DDIM mean without std^2 in the eps coefficient", "sampling/ddim_logprob.py",
     "torch.sqrt((1 - a_prev - std**2).clamp(min=0)) * eps", "torch.sqrt((1 - a_prev).clamp(min=0)) * eps",
     ["tests/unit/sampling/test_reference_formulas.py::test_ddim_step_equals_the_paper_and_diffusers_scheduler"]),
    ("GRPO advantages with the sign flipped", "objectives/grpo.py",
     "advantages=torch.tensor(table.advantage.to_numpy(), dtype=torch.float32),",
     "advantages=-torch.tensor(table.advantage.to_numpy(), dtype=torch.float32),",
     ["tests/unit/objectives/test_objective_direction.py::test_grpo_raises_the_likelihood_of_high_advantage_transitions"]),
    ("PPO surrogate taking the optimistic branch", "objectives/advantage_training.py",
     "loss = torch.maximum(unclipped, clipped).mean()", "loss = torch.minimum(unclipped, clipped).mean()",
     ["tests/unit/objectives/test_losses.py::test_grpo_loss_equals_the_papers_on_a_micro_batch"]),
    ("NFT optimality reversed", "objectives/nft.py",
     "return advantages.clamp(-clip_max, clip_max) / (2 * clip_max) + 0.5",
     "return 0.5 - advantages.clamp(-clip_max, clip_max) / (2 * clip_max)",
     ["tests/unit/objectives/test_objective_direction.py::test_nft_lowers_the_flow_matching_error_of_high_advantage_images"]),
    ("flow SDE std with sigma_max in the numerator at sigma = 1", "sampling/sde.py",
     "return noise_level * math.sqrt(sigma / denominator)",
     "return noise_level * math.sqrt((1 - denominator) / denominator)",
     ["tests/unit/sampling/test_reference_formulas.py::test_flow_sde_rollouts_record_the_papers_transitions"]),
    ("AWM's log-prob with the sign flipped", "objectives/awm.py",
     "    return (-weighted).float()", "    return weighted.float()",
     ["tests/unit/objectives/test_awm.py::test_awm_lowers_the_flow_matching_error_of_high_advantage_images"]),
    ("CPS noise scaled by sigma instead of sigma_next", "sampling/sde.py",
     "return float(sigmas[index + 1]) * math.sin(noise_level * math.pi / 2)",
     "return float(sigmas[index]) * math.sin(noise_level * math.pi / 2)",
     ["tests/unit/sampling/test_reference_formulas.py::test_cps_rollouts_record_the_papers_transitions"]),
]




@pytest.mark.parametrize("name, path, original, mutated, tests", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_named_mutant_is_killed(tmp_path, name, path, original, mutated, tests):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src/rewardloop", src / "rewardloop", ignore=shutil.ignore_patterns("__pycache__"))
    target = src / "rewardloop" / path
    text = target.read_text()
    assert text.count(original) == 1, f"{path}: the snippet of mutant {name!r} no longer occurs exactly once"
    target.write_text(text.replace(original, mutated))
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    where = subprocess.run([sys.executable, "-c", "import rewardloop; print(rewardloop.__file__)"], env=env,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(src)), where  # the copy shadows the installed package
    run = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], cwd=ROOT,
                         env=env, capture_output=True, text=True)
    # Exit status 1: tests ran and failed (not 2-4: interrupted, internal or usage error, nothing collected).
    assert run.returncode == 1 and " failed" in run.stdout, f"mutant {name!r} survived:\n{run.stdout[-2000:]}"
