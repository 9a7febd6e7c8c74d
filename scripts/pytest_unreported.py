"""Which selected tests a verbose pytest log never reported (device runs cut by a limit).

usage: python3 scripts/pytest_unreported.py LOG [pytest selection args...]

LOG is the output of `pytest -v` (with or without pytest-xdist, whose lines read
"[gw3] [ 12%] PASSED tests/...::name"). The selection args are those of the run (`-m gpu
tests/kernels`, say); the script collects them again (`--collect-only -q`) and prints the
outcome counts, every test that did not pass, and the tests the log never reported: with
xdist those were running or not yet started when the run was stopped.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

_OUTCOME = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(tests/\S+)")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    log = Path(argv[0]).read_text(errors="replace")
    outcome = {test: what for what, test in _OUTCOME.findall(log)}
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                             "-p", "no:benchmark", "-p", "no:cacheprovider", *argv[1:]],
                            capture_output=True, text=True, check=False).stdout
    selected = [line for line in listed.splitlines() if line.startswith("tests/")]
    missing = [t for t in selected if t not in outcome]
    print(dict(collections.Counter(outcome.values())))
    print(f"selected {len(selected)}, reported {len(outcome)}, not reported {len(missing)}")
    for test, what in outcome.items():
        if what not in ("PASSED", "SKIPPED"):
            print(f"  {what}: {test}")
    for test in missing:
        print(f"  not reported: {test}")
    return 1 if missing or any(w in ("FAILED", "ERROR") for w in outcome.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
