"""`pytest -n 2 --dist loadfile` (make test) with the longest test files first.

xdist's loadfile scheduler hands out whole files in the order of their number of tests (most first), and
tops a worker up with the next file as soon as it has 2 tests or fewer left. The suite's slowest files
have the fewest tests (tests/workflow/test_default_run.py: 1 test, the default config's 3 iterations, and once its
model build), so they came last, and one worker ran the final minutes alone. Here the next file
handed out is the one expected to take longest (longest processing time first: the two workers finish
within about one file's time of each other), and a worker is topped up only when on its last test (it
cannot start that test before it knows the next one, or is told to stop).

``SECONDS`` holds each slow file's expected duration on CI's 2-core machine (refine a figure from
``pytest --durations=0`` over the file: its tests' and fixtures' setup figures added); any other file
counts ``PER_TEST`` seconds a test. Only the order depends on them: a wrong figure makes the run
slower, never wrong.
"""

from __future__ import annotations

PER_TEST = 1.0
SECONDS = {  # measured: CI on a clean clone of b3ef796, 2 workers (the 10 slowest files); the others estimated below those
    "tests/workflow/test_crash_resume.py": 564,
    "tests/workflow/test_recipe_smoke_sd3.py": 639,  # dpo, nft, awm in 2 processes; dgpo (tiny, SD3.5-M), mixgrpo
    "tests/workflow/test_default_run.py": 451,  # its 3 iterations on the shipped model (the build took 1329 s of it until 2026-12-06)
    "tests/workflow/test_bad_inputs.py": 316,
    "tests/workflow/test_multiprocess_training.py": 391,  # + frozen rank, two nodes; the 5 advantage objectives
    "tests/unit/host/test_cpu_kernels.py": 241,  # two gradient probes under qemu
    "tests/workflow/test_recipe_smoke_flux.py": 374,  # sft in 2 processes; dgpo, mixgrpo (tiny FLUX.1-dev, schnell)
    "tests/workflow/test_recipe_smoke_qwen_image.py": 209,  # its recipe and the 6 other objectives
    "tests/workflow/test_tracking.py": 221,
    "tests/workflow/test_gpu_smoke.py": 200,  # gpu_smoke (2 recipes) and gpu_slot (1) at tiny size
    "tests/workflow/test_recipe_smoke.py": 159,
    "tests/workflow/test_workflow.py": 170,
    "tests/workflow/test_experiments.py": 170,
    "tests/workflow/test_workflow_flux.py": 170,
    "tests/workflow/test_guard_workflow.py": 160,
    "tests/workflow/test_fsdp_training.py": 160,
    "tests/workflow/test_served_reward_run.py": 150,
    "tests/workflow/test_workflow_sd3.py": 150,
    "tests/workflow/test_rerun_protection.py": 160,
    "tests/workflow/test_families_workflow.py": 120,
    "tests/unit/models/test_half_precision_fidelity.py": 120,  # 12 cases and the cast check, each 3 samplings
    "tests/workflow/test_integrity.py": 100,
    "tests/workflow/test_slurm.py": 90,  # the 2-node dry runs (the cluster test runs in its own tier)
    "tests/unit/training/test_full_and_offline.py": 60,
    "tests/unit/models/test_qwen_image_family.py": 30,
    "tests/unit/objectives/test_grpo_guard.py": 30,
    "tests/unit/objectives/test_dgpo.py": 60,  # 47 s alone: 5 tiny trains
}


def expected_seconds(scope: str, tests: int) -> float:
    """A file's (a loadfile scope's: its path from the rootdir) expected duration."""
    return SECONDS.get(scope, PER_TEST * tests)


def longest_first_scheduler(config, log):
    """A LoadFileScheduling that hands out the longest file left, topping a worker up on its last test."""
    from xdist.scheduler import LoadFileScheduling

    class LongestFileFirst(LoadFileScheduling):
        def _assign_work_unit(self, node) -> None:
            # the longest file first (the first of equals in xdist's own order), then xdist's assignment
            longest = max(self.workqueue, key=lambda scope: expected_seconds(scope, len(self.workqueue[scope])))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            if not node.shutting_down and self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
                return  # more than its last test left: the next file may suit the other worker better
            super()._reschedule(node)

    return LongestFileFirst(config, log)
