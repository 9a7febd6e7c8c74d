"""Which selected tests a verbose pytest log never reported (device runs cut by a limit).

usage: python3 scripts/pytest_unreported.py LOG [pytest selection args...]

LOG is the output of `pytest -v` (without `-q`, which cancels it), with pytest-xdist (lines
"[gw3] [ 12%] PASSED tests/...::name") or without ("tests/...::name PASSED [ 12%]"). The
selection args are those of the run (`-m gpu tests/kernels`, say); the script collects them
again (`--collect-only -q`) and prints the outcome counts, every test that did not pass, and
the tests the log never reported: with xdist those were running or not yet started when the
run was stopped. Exit status 0 when every selected test passed or was skipped, 1 otherwise,
2 when the selection collects nothing.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

_WORDS = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
#: "[gw3] [ 12%] PASSED tests/...::name" (xdist) and "tests/...::name PASSED [ 12%]" (plain).
_XDIST = re.compile(rf"\b({_WORDS})\s+(tests/\S+)")
_PLAIN = re.compile(rf"^(tests/\S+)\s+({_WORDS})\b", re.MULTILINE)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    log = Path(argv[0]).read_text(errors="replace")
    outcome = {test: what for what, test in _XDIST.findall(log)}
    outcome.update({test: what for test, what in _PLAIN.findall(log)})
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                             "-p", "no:benchmark", "-p", "no:cacheprovider", *argv[1:]],
                            capture_output=True, text=True, check=False).stdout
    selected = [line for line in listed.splitlines() if line.startswith("tests/")]
    if not selected:
        print("pytest --collect-only selected no test: check the selection args", file=sys.stderr)
        return 2
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
