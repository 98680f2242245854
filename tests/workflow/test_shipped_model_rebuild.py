"""The shipped tiny model's bytes are a whole rebuild's, checked whenever the builder's sources or its
libraries differ from those its build_info.json recorded (models/tiny/builds.py): a change to the builder
that changes the bytes fails here, in CI, with the way to refresh the weights. While the builder is as it
was, the fast test of its first steps (tests/unit/models/test_shipped_models.py) stands in for this ~12
minutes' rebuild; `make tiny-check` (or REWARDLOOP_REBUILD_SHIPPED=1 here) rebuilds anyway.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from rewardloop.host import cpu_kernels
from rewardloop.models.tiny import builds as tiny_builds

pytestmark = pytest.mark.workflow

MODELS = Path(__file__).resolve().parents[2] / "resources/models"
SHIPPED = sorted(path.parent for path in MODELS.glob(f"*/{tiny_builds.BUILD_INFO}"))


def builder_changed(folder: Path) -> list[str]:
    """What of the builder differs from what the shipped model's build recorded."""
    info = tiny_builds.read_build_info(folder)
    recorded, current = info.get("builder", {}), tiny_builds.builder_digest(info["recipe"]["family"])
    return [name for name in ("sources", "libraries") if recorded.get(name) != current[name]]


@pytest.mark.skipif(not cpu_kernels.has_avx2(), reason="the shipped bytes hold on x86-64 CPUs with AVX2")
@pytest.mark.parametrize("folder", SHIPPED, ids=lambda folder: folder.name)
def test_a_rebuild_gives_the_shipped_bytes_when_the_builder_changed(folder):
    changed = builder_changed(folder)
    if not changed and not os.environ.get("REWARDLOOP_REBUILD_SHIPPED"):
        pytest.skip("the builder's sources and libraries are those the shipped model was built with")
    import torch

    threads = torch.get_num_threads()
    try:
        differences = tiny_builds.rebuild_differences(folder, cpu_kernels.in_effect(), progress=False)
    finally:
        torch.set_num_threads(threads)
    assert not differences, (
        f"the builder's {' and '.join(changed) or 'code'} changed and a rebuild of {folder} gives other bytes: "
        f"{'; '.join(differences)}. If that is meant, rebuild it (`make tiny` for tiny-sd15, `rewardloop build-tiny` for the others), commit the folder, and update "
        "the figures that follow from its bytes (README's table, tests/workflow/test_default_run.py)")
    if changed:
        warnings.warn(f"the builder's {' and '.join(changed)} changed and a rebuild gives the shipped bytes: "
                      "`rewardloop build-tiny --check --out FOLDER` (make tiny-check) records the new builder, so that CI does not rebuild again")
