"""The slowest test files of a pytest run, from its JUnit XML (``pytest --junitxml``): what `.ci/run` prints
after `make test`, and names when the suite passes its time budget.

A tool, not part of the package: it imports only the standard library. A test's time is JUnit's (its
setup, call and teardown); a file's is the sum of its tests', i.e. worker-seconds, about twice the wall
time it adds to a 2-worker run. ``python tools/slowest_test_files.py junit.xml [N]``.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_file(classname: str) -> str:
    """``tests.workflow.test_x`` or ``tests.workflow.test_x.TestClass`` -> ``tests/workflow/test_x.py``."""
    parts = [part for part in classname.split(".") if part]  # a collection error's classname is ""
    for end in range(len(parts), 0, -1):
        candidate = Path(*parts[:end]).with_suffix(".py")
        if (ROOT / candidate).is_file():
            return str(candidate)
    return classname or "(no test file: a collection or session error)"


def seconds_by_file(junit_xml: str | Path) -> Counter:
    """{test file: seconds of its tests} of every test case in the report."""
    totals: Counter = Counter()
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        totals[test_file(case.get("classname", ""))] += float(case.get("time") or 0.0)
    return totals


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    count = int(argv[1]) if len(argv) > 1 else 10
    totals = seconds_by_file(argv[0])
    print(f"the {count} slowest test files (worker-seconds; all {len(totals)} files: {sum(totals.values()):.0f} s):")
    for name, seconds in totals.most_common(count):
        print(f"  {seconds:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
