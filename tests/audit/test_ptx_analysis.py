"""The PTX analysis on hand-written PTX (no nvcc): parsing, barrier intervals, privacy."""

from __future__ import annotations

import pytest

from safemon.audit.cfg import ENTRY, build_cfg
from safemon.audit.dataflow import Affine
from safemon.audit.ptx import PtxParseError, parse_ptx
from safemon.audit.races import SharedAccess, thread_private
from safemon.audit.static_audit import audit_ptx_text

LOOP = """
.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.reg .b32 %r<9>;
\t.shared .align 4 .b8 buf[1024];
\tmov.u32 %r1, %tid.x;
\tshl.b32 %r2, %r1, 2;
\tmov.u32 %r3, buf;
\tadd.s32 %r4, %r3, %r2;
\tmov.u32 %r5, 0;
$L__BB0_1:
\tst.shared.u32 [%r4], %r5;
\tBARRIER1
\tld.shared.u32 %r6, [%r4+4];
\tBARRIER2
\tadd.s32 %r5, %r5, 1;
\tsetp.lt.s32 %p1, %r5, 10;
\t@%p1 bra $L__BB0_1;
\tret;
}
"""


def _ptx(b1: bool, b2: bool) -> str:
    return LOOP.replace("BARRIER1", "bar.sync 0;" if b1 else "").replace(
        "BARRIER2", "bar.sync 0;" if b2 else "")


def test_parser_reads_params_shared_symbols_labels_and_lines() -> None:
    kernels, _ = parse_ptx(_ptx(True, True))
    k = kernels[0]
    assert k.name == "k" and k.params == ["k_param_0"] and k.shared == {"buf"}
    st = next(i for i in k.instructions if i.op == "st")
    assert st.space() == "shared" and st.address() is not None and st.line == 14


def test_barrier_intervals_follow_the_loop_back_edge() -> None:
    kernels, _ = parse_ptx(_ptx(True, False))
    k = kernels[0]
    origins = build_cfg(k).interval_origins()
    st = next(n for n, i in enumerate(k.instructions) if i.op == "st")
    ld = next(n for n, i in enumerate(k.instructions) if i.op == "ld")
    bar = next(n for n, i in enumerate(k.instructions) if i.op == "bar")
    assert origins[st] == {ENTRY, bar}  # reached from the entry and, around the loop, the barrier
    assert origins[ld] == {bar}


@pytest.mark.parametrize(("b1", "b2", "races"), [
    (True, True, 0),   # write | barrier | read | barrier: separated both ways
    (True, False, 1),  # the read reaches the next trip's write around the back edge
    (False, True, 1),  # the read follows the write in the same interval
])
def test_race_needs_a_barrier_on_every_path(b1: bool, b2: bool, races: int) -> None:
    findings, _ = audit_ptx_text(_ptx(b1, b2), "hand", exact=True)
    assert sum(f.check == "race" for f in findings) == races


def test_thread_private_needs_disjoint_bytes_for_every_other_thread() -> None:
    def acc(const: int, coeff: int = 4, width: int = 4) -> SharedAccess:
        aff = Affine((("%tid.x", coeff), ("buf", 1)), const)
        return SharedAccess(0, None, True, True, False, frozenset({"buf"}), aff, width)  # type: ignore[arg-type]

    assert thread_private(acc(0), acc(0))        # s[t] then s[t]
    assert not thread_private(acc(0), acc(4))    # s[t] then s[t+1]
    assert not thread_private(acc(0, coeff=2), acc(0))  # 4-byte slots 2 bytes apart overlap
    assert not thread_private(acc(0, coeff=0), acc(0))  # every thread the same address


def test_unterminated_entry_is_a_parse_error() -> None:
    with pytest.raises(PtxParseError):
        parse_ptx(".visible .entry k(\n)\n{\n\tret;\n")


ASYNC = """
.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.reg .b32 %r<9>;
\t.reg .b64 %rd<3>;
\t.shared .align 4 .b8 buf[1024];
\tld.param.u64 %rd1, [k_param_0];
\tmov.u32 %r1, %tid.x;
\tshl.b32 %r2, %r1, 2;
\tmov.u32 %r3, buf;
\tadd.s32 %r4, %r3, %r2;
\tcp.async.ca.shared.global [%r4], [%rd1], 4, 4;
\tcp.async.commit_group;
\tcp.async.wait_group 0;
\tBARRIER
\tld.shared.u32 %r6, [%r4+4];
\tcp.async.commit_group;
\tcp.async.wait_group 0;
\tret;
}
"""


@pytest.mark.parametrize(("barrier", "races"), [(True, 0), (False, 1)])
def test_async_copy_is_a_shared_write_and_its_bookkeeping_is_not(barrier: bool, races: int) -> None:
    """An async copy into shared memory races with another thread's read of its symbol in the
    same barrier interval; commit_group and wait_group, which name no address, are no
    accesses (before they were read as writes to any shared symbol)."""
    text = ASYNC.replace("BARRIER", "bar.sync 0;" if barrier else "")
    findings, _ = audit_ptx_text(text, "hand", exact=True)
    assert sum(f.check == "race" for f in findings) == races
