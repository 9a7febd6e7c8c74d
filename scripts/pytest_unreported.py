"""Which selected tests a pytest run never reported (device runs cut by a limit).

usage: python3 scripts/pytest_unreported.py REPORT [pytest selection args...]

REPORT is either a JUnit XML file (`pytest --junitxml=F`, ending in `.xml`) or the output of
`pytest -v` (without `-q`, which cancels it), with pytest-xdist (lines
"[gw3] [ 12%] PASSED tests/...::name") or without ("tests/...::name PASSED [ 12%]"). The
selection args are those of the run (`-m gpu tests/kernels`, say); the script collects them
again (`--collect-only -q`) and prints the outcome counts, every test that did not pass, and
the tests the report never named: with xdist those were running or not yet started when the
run was stopped. A JUnit report also gives each test's seconds; the slowest ten are listed.
Exit status 0 when every selected test passed or was skipped, 1 otherwise, 2 when the
selection collects nothing.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

_WORDS = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
#: "[gw3] [ 12%] PASSED tests/...::name" (xdist) and "tests/...::name PASSED [ 12%]" (plain).
_XDIST = re.compile(rf"\b({_WORDS})\s+(tests/\S+)")
_PLAIN = re.compile(rf"^(tests/\S+)\s+({_WORDS})\b", re.MULTILINE)


#: Outcome words, worst first: a test reported twice (a teardown error after its call) keeps
#: the worse one.
_RANK = {"ERROR": 0, "FAILED": 1, "XPASS": 2, "SKIPPED": 3, "XFAIL": 4, "PASSED": 5}
_REPO = Path(__file__).resolve().parents[1]


def junit_outcomes(path: Path, root: Path = _REPO) -> dict[str, tuple[str, float]]:
    """Test id ("tests/a/test_b.py::Class::test_c[p]") → (outcome word, seconds) from a JUnit
    XML report. JUnit names a test by a dotted class name; the module is its longest prefix
    that is a file under `root`, and the rest are class names. A module that failed to
    collect has an empty class name and its dotted path as name; it is reported as
    ("tests/a/test_b.py", "ERROR")."""
    out: dict[str, tuple[str, float]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        parts = (classname or name).split(".")
        for cut in range(len(parts), 0, -1):
            module = "/".join(parts[:cut]) + ".py"
            if (root / module).is_file():
                break
        else:
            cut, module = len(parts), "/".join(parts) + ".py"
        test = "::".join([module, *parts[cut:], name]) if classname else module
        tags = {child.tag for child in case}
        what = ("FAILED" if "failure" in tags else "ERROR" if "error" in tags
                else "SKIPPED" if "skipped" in tags else "PASSED")
        seconds = float(case.get("time", "0") or 0)
        if test not in out or _RANK[what] < _RANK[out[test][0]]:
            out[test] = (what, seconds)
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    report = Path(argv[0])
    seconds: dict[str, float] = {}
    if report.suffix == ".xml" and not report.is_file():
        print(f"{report}: no JUnit report (pytest killed before it wrote one?); "
              "every selected test counts as not reported")
        outcome = {}
    elif report.suffix == ".xml":
        parsed = junit_outcomes(report)
        outcome = {test: what for test, (what, _) in parsed.items()}
        seconds = {test: s for test, (_, s) in parsed.items()}
    else:
        log = report.read_text(errors="replace")
        outcome = {test: what for what, test in _XDIST.findall(log)}
        outcome.update({test: what for test, what in _PLAIN.findall(log)})
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                             "-p", "no:benchmark", "-p", "no:cacheprovider", *argv[1:]],
                            capture_output=True, text=True, check=False)
    # Test ids only: a collection error's traceback also has lines starting "tests/".
    selected = [line for line in listed.stdout.splitlines()
                if line.startswith("tests/") and "::" in line]
    if listed.returncode not in (0, 5):  # 5: nothing selected, reported below
        print(f"pytest --collect-only exited {listed.returncode} here (collection errors?)")
    if not selected:
        print("pytest --collect-only selected no test: check the selection args", file=sys.stderr)
        return 2
    missing = [t for t in selected if t not in outcome]
    print(dict(collections.Counter(outcome.values())))
    print(f"selected {len(selected)}, reported {len(outcome)}, not reported {len(missing)}")
    if seconds:
        print(f"test seconds: {sum(seconds.values()):.0f} in all; slowest:")
        for test, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:10]:
            print(f"  {s:7.1f} s  {test}")
    for test, what in outcome.items():
        if what not in ("PASSED", "SKIPPED"):
            print(f"  {what}: {test}")
    for test in missing:
        print(f"  not reported: {test}")
    return 1 if missing or any(w in ("FAILED", "ERROR") for w in outcome.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
