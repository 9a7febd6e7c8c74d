"""Shared by the device probes `request_timeline.py` and `span_probe.py`: install a
recording hook in every Python process a probe starts (the daemon, its channels) and in
the probe itself.

`install(work, module, out_env, body)` writes `<module>.py` (a preamble, then `body`) and a
`sitecustomize.py` that imports it and then runs the sitecustomize it shadows (the machine's
own, if any), puts both first on PYTHONPATH for the children, and imports the module here.
The preamble gives `body` what it records into: `_rec` (a list), `_now` (monotonic ns, one
clock for every process on Linux) and `_OUT` (the directory named by the environment
variable `out_env`); each process writes `_rec` to `<_OUT>/<pid>.jsonl` at exit or SIGTERM.
`body` runs only when that variable is set.
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from pathlib import Path
from types import ModuleType

__all__ = ["install"]

_PREAMBLE = '''
import atexit, json, os, time
_OUT = os.environ.get({out_env!r})
if _OUT:
    _rec = []
    _now = time.monotonic_ns

    def _dump():
        with open(os.path.join(_OUT, f"{{os.getpid()}}.jsonl"), "w") as f:
            for r in _rec:
                f.write(json.dumps(r) + "\\n")

    atexit.register(_dump)
    import signal
    def _term(signum, frame, _prev=signal.getsignal(signal.SIGTERM)):
        _dump()
        if callable(_prev):
            _prev(signum, frame)
        else:
            raise SystemExit(0)
    signal.signal(signal.SIGTERM, _term)
'''

_SITECUSTOMIZE = '''
import os, sys
import {module}
_here = os.path.dirname(os.path.abspath(__file__))
for _d in sys.path:
    _c = os.path.join(_d, "sitecustomize.py")
    if os.path.abspath(_d or ".") != _here and os.path.isfile(_c):
        exec(compile(open(_c).read(), _c, "exec"), {{"__name__": "sitecustomize", "__file__": _c}})
        break
'''


def install(work: Path, module: str, out_env: str, body: str) -> ModuleType:
    """Install the hook (module docstring) under `work`/site; `body` is Python source at
    the top level (dedented here). Returns the imported module of this process."""
    site = work / "site"
    site.mkdir(parents=True, exist_ok=True)
    source = _PREAMBLE.format(out_env=out_env) + textwrap.indent(textwrap.dedent(body), "    ")
    (site / f"{module}.py").write_text(source)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(module=module))
    repo = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", ""),
                                                repo])
    sys.path.insert(0, str(site))
    return importlib.import_module(module)
