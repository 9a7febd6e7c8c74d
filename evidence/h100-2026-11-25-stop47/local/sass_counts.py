"""SASS instruction counts of the `large` 4096³ builds, this tree's mmm.cu against the previous
one (nvcc -arch=sm_90 -cubin with the builds' defines, nvdisasm). Usage:
    python3 sass_counts.py PREVIOUS_MMM.cu NVDISASM"""
import collections
import os
import re
import subprocess
import sys

from safemon.kernels.catalog import variant_for_shape
from safemon.kernels.gpu import build_for

previous, nvdisasm = sys.argv[1], sys.argv[2]
KEEP = ["FFMA", "LDS.128", "LDS", "LDGSTS.E.BYPASS.128", "LDGSTS.E", "BAR.SYNC.DEFER_BLOCKING",
        "BRA", "IMAD", "IADD3", "LOP3.LUT"]
for spec in [(None, None, "fma"), ("ones", "M", "fma"), ("twos", "M", "fma")]:
    v = variant_for_shape(4096, 4096, 4096, *spec, None, None)
    b = build_for(v)
    for src in [str(b.source), previous]:
        cmd = ["nvcc", "-arch=sm_90", "-cubin", "-o", "/tmp/sass_counts.cubin", "-Xptxas", "-v",
               "-I", str(b.include_dirs[0]), *[f"-D{k}={val}" for k, val in b.defines], src]
        r = subprocess.run(cmd, check=True, capture_output=True, text=True)
        regs = re.findall(r"Used (\d+) registers", r.stderr)
        out = subprocess.run([nvdisasm, "/tmp/sass_counts.cubin"], capture_output=True,
                             text=True, check=True).stdout
        ops = collections.Counter(re.findall(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", out))
        print(v.name, "this tree" if src == str(b.source) else os.path.basename(src),
              f"registers {regs[-1] if regs else '?'}", f"instructions {sum(ops.values())}",
              {k: ops[k] for k in KEEP if k in ops})
