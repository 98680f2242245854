"""The docs are true to the tree: every path of this repository that the README or a page of docs/ names in
backticks (`src/rewardloop/...`, `tests/...`, `bench/...`, ...) exists, so that a moved or renamed file fails here until its
docs follow. (Paths in other repositories, which the docs cite as references, start with their own folders;
`scripts/` is left out: the reference repositories' scripts/ share the name.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = ("src/rewardloop/", "tests/", "bench/", "rules/", "tools/", "configs/", "docs/", "schemas/", "resources/", "profiles/",
        "envs/", ".ci/")
# Files the docs show as examples to write, not files of the tree
EXAMPLES = {"src/rewardloop/objectives/sft_minsnr.py"}


def named_paths(text: str) -> list[str]:
    """The repository paths in backticks in ``text`` (a test id's ``::`` and an anchor dropped; patterns and
    placeholders skipped)."""
    found = []
    for code in re.findall(r"`([^`\s]+)`", text):
        path = code.rstrip(".,:;)").split("::")[0].split("#")[0]
        if path.startswith(OURS) and not any(c in path for c in "*<>{}[]$") and path not in EXAMPLES:
            found.append(path)
    return found


def test_paths_are_found_in_backticks_and_patterns_are_skipped():
    text = "see `src/rewardloop/a.py::test_x`, `docs/b.md#part`, `tests/*.py`, `results/x.json`, `configs/<name>.yaml`"
    assert named_paths(text) == ["src/rewardloop/a.py", "docs/b.md"]


def test_every_path_the_docs_name_exists():
    missing = [f"{doc.relative_to(ROOT)}: {path}" for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
               for path in named_paths(doc.read_text()) if not (ROOT / path).exists()]
    assert not missing, "paths the docs name that the tree does not have:\n  " + "\n  ".join(missing)
