"""scripts/pytest_unreported.py: the JUnit reader that names each test as pytest does."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from tests.script_module import load_script

REPO = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    return load_script("pytest_unreported")


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.test_dims" name="test_a[1x2x3]" time="1.50"/>
<testcase classname="tests.test_dims.TestGroup" name="test_b" time="0.25"/>
<testcase classname="tests.test_dims" name="test_c" time="2.0"><failure message="x">boom</failure></testcase>
<testcase classname="tests.test_dims" name="test_d" time="0.0"><skipped message="no gpu"/></testcase>
<testcase classname="tests.test_dims" name="test_e" time="0.1"/>
<testcase classname="tests.test_dims" name="test_e" time="0.3"><error message="teardown">t</error></testcase>
<testcase classname="tests.test_dims" name="test_f" time="0.0"><skipped message="s"/></testcase>
<testcase classname="tests.test_dims" name="test_f" time="0.1"><error message="teardown">t</error></testcase>
<testcase classname="" name="tests.test_seconds" time="0.0"><error message="collection failure">E</error></testcase>
</testsuite></testsuites>
"""


def test_junit_names_outcomes_and_seconds(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text(JUNIT)
    got = _script().junit_outcomes(report, REPO)
    assert got == {
        "tests/test_dims.py::test_a[1x2x3]": ("PASSED", 1.5),
        "tests/test_dims.py::TestGroup::test_b": ("PASSED", 0.25),
        "tests/test_dims.py::test_c": ("FAILED", 2.0),
        "tests/test_dims.py::test_d": ("SKIPPED", 0.0),
        # passed (or skipped) its call, then errored in teardown: the error is kept
        "tests/test_dims.py::test_e": ("ERROR", 0.3),
        "tests/test_dims.py::test_f": ("ERROR", 0.1),
        # a module that failed to collect
        "tests/test_seconds.py": ("ERROR", 0.0),
    }


def test_a_run_cut_short_exits_1_and_names_what_it_never_reported(tmp_path: Path, capsys) -> None:
    report = tmp_path / "r.xml"
    report.write_text(JUNIT.replace('name="test_a[1x2x3]"', 'name="test_dims_parsing"'))
    code = _script().main([str(report), "-p", "no:randomly", "tests/test_dims.py"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED: tests/test_dims.py::test_c" in out
    assert "not reported: tests/test_dims.py::test_the_canonical_form_is_exactly_what_key_writes" in out
    assert "not reported: tests/test_dims.py::test_dims_parsing" not in out


def test_a_missing_report_counts_every_selected_test_as_not_reported(tmp_path: Path, capsys) -> None:
    code = _script().main([str(tmp_path / "never-written.xml"), "-p", "no:randomly",
                           "tests/test_dims.py"])
    out = capsys.readouterr().out
    assert code == 1
    assert "no JUnit report" in out
    assert "not reported: tests/test_dims.py::test_dims_parsing" in out
