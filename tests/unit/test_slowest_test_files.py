"""tools/slowest_test_files.py: what .ci/run prints after make test (it once crashed on a collection error)."""

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "slowest_test_files.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("slowest_test_files", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_times_add_up_per_file_and_a_case_without_classname_is_named_not_fatal(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="" name="collection" time="3.0"/>'
        '<testcase classname="tests.unit.test_slowest_test_files" name="a" time="1.5"/>'
        '<testcase classname="tests.unit.test_slowest_test_files" name="b" time="2.0"/>'
        "</testsuite></testsuites>"
    )
    totals = load_tool().seconds_by_file(report)
    assert totals["tests/unit/test_slowest_test_files.py"] == 3.5
    assert [name for name in totals if "collection" in name] != []
    assert sum(totals.values()) == 6.5
