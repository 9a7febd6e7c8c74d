"""In-kernel fault injection: sampled register-level faults inside the protected kernel.

The fault model of register-level injectors such as NVBitFI, applied to our own kernels
through the injection build (`SAFEMON_INJECT=1`, zero cost to production builds). A *site* is
(thread, k step, target, index, bit):

* ``operand_a`` — bit `bit` of the register a[index] (index < TM) after it is read from
  shared memory at padded k step `kstep`, before the folds and MACs of that step;
* ``operand_b`` — the same for b[index] (index < TN);
* ``accumulator`` — acc[i][j] (index = i·TN + j) right after its MAC at that k step;
* ``es_word`` — ES word `index` of the thread, flipped just before the comparison.

*Transient* faults flip once, at `kstep`. *Permanent* faults flip the same bit at every k step
(every MAC) of one thread (``thread``) or of every thread of one block (``block``); k step
is then ignored and ES-word faults do not apply. Sites are drawn uniformly (seeded) over the
launched threads (padding threads included: their registers are real), padded k steps, the
targets asked for, their indices and the 32 bits.

RMT variants run each logical thread twice: in two lanes of one warp (`Variant.rmt ==
"warp"`) or in two blocks of one grid (`"block"`). A transient or thread-permanent fault hits
one replica (drawn uniformly); an ES-word fault hits replica 0, whose words are the stored
ones. A block-permanent fault (a faulty SM) hits both replicas of every thread of the block
with intra-warp RMT (both lanes run on that SM, so replication inside one SM cannot see it),
and one copy of the block with inter-block RMT, drawn uniformly: this assumes the two copies
ran on different SMs, which the hardware scheduler decides and nothing guarantees
(docs/RMT.md gives the measured share of pairs that shared an SM). For these variants the kernel also sets `launch.RMT_DETECTED` when the replicas
disagreed, and C "differs" when either replica's accumulators differ from golden. ABFT
variants (`Variant.abft`) set `launch.ABFT_DETECTED` when the ABFT check of the stored C would
fail; a fault that changes C and passes it is *below tolerance* (`InKernelResult.
below_tolerance`, with the largest relative error it left in C), never counted as detected.

Each run is classified against the golden (NumPy reference) C and ES:
``masked`` (neither differs), ``detected`` (ES differs or the RMT replicas disagreed, whatever
C does), ``sdc`` (C differs and nothing flagged it: silent data corruption). For the safety
figures `effect_counts` keeps the two verdicts apart (``neither``, ``es_only``, ``c_only``,
``both``; "es" there means flagged, by ES or by RMT): only a fault that changes C
can corrupt a released result, so the in-kernel DC (`safemon.evidence.inkernel_schema`) is
``both / (both + c_only)``, and ES-word flips, which never change C, are safe faults. The CPU reference does not model these targets, so the
campaign needs the cupy backend; sampling and classification are pure and tested on CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from safemon.dims import Dims
from safemon.evidence.campaign import C_DIFFERS, ES_DIFFERS, inputs_for
from safemon.faults.launch import ABFT_DETECTED, RMT_DETECTED, SCOPES, TARGETS, injection_rows
from safemon.kernels.catalog import Variant

__all__ = [
    "EFFECTS",
    "IN_KERNEL_TARGETS",
    "OUTCOMES",
    "InKernelResult",
    "classify",
    "run_inkernel_campaign",
    "sample_sites",
]

IN_KERNEL_TARGETS: tuple[str, ...] = ("operand_a", "operand_b", "accumulator", "es_word")
OUTCOMES: tuple[str, ...] = ("masked", "detected", "sdc")
#: The four verdict classes (ES differs? C differs?) kept apart in the evidence.
EFFECTS: tuple[str, ...] = ("neither", "es_only", "c_only", "both")
I32 = npt.NDArray[np.int32]
U32 = npt.NDArray[np.uint32]
#: Verdict bits that mean "the kernel flagged this run": ES differs, the RMT replicas
#: disagreed, or the ABFT check failed.
FLAGGED = np.uint32(ES_DIFFERS) | RMT_DETECTED | ABFT_DETECTED
F32 = npt.NDArray[np.float32]


def classify(verdicts: npt.ArrayLike) -> npt.NDArray[np.str_]:
    """Outcome names for verdict words (bit 0 ES differs, bit 1 C differs, bit 2 RMT, bit 3
    ABFT)."""
    v = np.asarray(verdicts, dtype=np.uint32)
    out = np.full(v.shape, "masked", dtype="<U8")
    out[(v & C_DIFFERS) != 0] = "sdc"
    out[(v & FLAGGED) != 0] = "detected"
    return out


def _index_limit(target: str, variant: Variant) -> int:
    t = variant.tile
    return {"operand_a": t.tm, "operand_b": t.tn, "accumulator": t.tm * t.tn,
            "es_word": variant.words}[target]


def sample_sites(
    variant: Variant,
    dims: Dims,
    n: int,
    *,
    seed: int = 0,
    targets: Sequence[str] = IN_KERNEL_TARGETS,
    scope: str = "transient",
) -> I32:
    """Draw `n` injection sites as (n, 8) Injection rows (layout: `launch.FIELDS`).

    Variants without RMT draw exactly the sites they drew before the `copy` field existed
    (copy -1); RMT variants then draw the replica (module docstring).

    Args:
        scope: "transient", "thread" (permanent in one thread) or "block" (permanent in
            every thread of one block).

    Raises:
        ValueError: n < 1, an unknown target or scope, "es_word" with a permanent scope or an
            unprotected variant.
    """
    if n < 1:
        raise ValueError(f"the number of sites must be positive, not {n}")
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; known: {', '.join(SCOPES)}")
    for tg in targets:
        if tg not in IN_KERNEL_TARGETS:
            raise ValueError(f"unknown target {tg!r}; known: {', '.join(IN_KERNEL_TARGETS)}")
    if not targets:
        raise ValueError("no target given")
    if "es_word" in targets and (scope != "transient" or variant.words == 0):
        raise ValueError("es_word faults need a transient scope and a protected variant")
    rng = np.random.default_rng(seed)
    t = variant.tile
    gx, gy = t.grid(dims.m, dims.n)
    blocks = gx * gy
    tgt_idx = rng.integers(0, len(targets), size=n)
    tgt_names = [targets[i] for i in tgt_idx]
    limits = np.array([_index_limit(tg, variant) for tg in tgt_names], dtype=np.int64)
    index = (rng.random(n) * limits).astype(np.int64)
    bit = rng.integers(0, 32, size=n)
    thread = rng.integers(0, blocks * t.threads, size=n)
    kstep = rng.integers(0, t.k_padded(dims.k), size=n)
    block = thread // t.threads
    code = np.array([TARGETS[tg] for tg in tgt_names], dtype=np.int64)
    if scope == "block":
        thread = np.full(n, -1, dtype=np.int64)
    if scope != "transient":
        kstep = np.full(n, -1, dtype=np.int64)
    copy = np.full(n, -1, dtype=np.int64)
    # Intra-warp replicas share their SM, so a block-permanent fault hits both; inter-block
    # replicas are separate blocks, so it hits the one drawn (module docstring).
    if variant.replicas > 1 and (scope != "block" or variant.rmt == "block"):
        copy = rng.integers(0, variant.replicas, size=n)
        copy[code == TARGETS["es_word"]] = 0
    return injection_rows(n, target=code, index=index, bit=bit, thread=thread, block=block,
                          kstep=kstep, scope=SCOPES[scope], copy=copy)


@dataclass(frozen=True)
class InKernelResult:
    """A sampled in-kernel campaign: the sites, their verdict words and outcome counts."""

    variant: Variant
    dims: Dims
    scope: str
    seed: int
    rows: I32
    verdicts: U32
    seconds: float
    rel_errors: F32 | None = None

    def below_tolerance(self) -> dict[str, float | int] | None:
        """ABFT variants: C-changing faults that nothing flagged ({"count", "max_rel_error"},
        the error as max |ΔC|/max(|C|, 2⁻¹²⁶) over the stored C); None for other variants."""
        if self.rel_errors is None:
            return None
        escaped = ((self.verdicts & C_DIFFERS) != 0) & ((self.verdicts & FLAGGED) == 0)
        errs = self.rel_errors[escaped]
        return {"count": int(escaped.sum()),
                "max_rel_error": float(errs.max()) if errs.size else 0.0}

    def counts(self) -> dict[str, dict[str, int]]:
        """{target: {outcome: count}} plus "all"."""
        names = {code: name for name, code in TARGETS.items()}
        outcomes = classify(self.verdicts)
        out: dict[str, dict[str, int]] = {}
        targets = self.rows[:, 0]
        for key, mask in [("all", np.ones(targets.shape, bool))] + [
            (names[int(c)], targets == c) for c in np.unique(targets)
        ]:
            out[key] = {o: int(np.count_nonzero(outcomes[mask] == o)) for o in OUTCOMES}
        return out

    def effect_counts(self) -> dict[str, dict[str, int]]:
        """{target: {effect: count}} for the targets sampled (EFFECTS: neither, es_only,
        c_only, both)."""
        names = {code: name for name, code in TARGETS.items()}
        es = (self.verdicts & FLAGGED) != 0
        c = (self.verdicts & C_DIFFERS) != 0
        classes = {"neither": ~es & ~c, "es_only": es & ~c, "c_only": ~es & c, "both": es & c}
        targets = self.rows[:, 0]
        out: dict[str, dict[str, int]] = {}
        for code in np.unique(targets):
            mask = targets == code
            out[names[int(code)]] = {k: int(np.count_nonzero(v & mask)) for k, v in classes.items()}
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "variant": self.variant.name, "dims": self.dims.key, "scope": self.scope,
            "seed": self.seed, "sites": int(self.rows.shape[0]), "counts": self.counts(),
            "seconds": self.seconds, "below_tolerance": self.below_tolerance(),
        }


def run_inkernel_campaign(
    variant: Variant,
    dims: Dims,
    n: int,
    *,
    seed: int = 0,
    targets: Sequence[str] = IN_KERNEL_TARGETS,
    scope: str = "transient",
    progress: Callable[[int], None] | None = None,
) -> InKernelResult:
    """Run `n` sampled in-kernel faults on the GPU (inputs `inputs_for(dims, seed)`).

    Raises:
        BackendUnavailableError: no CuPy or no device (the NumPy reference has no model of
            register faults).
        GoldenMismatchError: the fault-free run differs from the reference.
        ValueError: see `sample_sites`.
    """
    from safemon.faults.launch import run_injections
    from safemon.kernels.reference import reference_matmul

    start = time.perf_counter()
    rows = sample_sites(variant, dims, n, seed=seed, targets=targets, scope=scope)
    a, b = inputs_for(dims, seed)
    gc, ges = reference_matmul(a, b, variant)
    errs = np.zeros(rows.shape[0], dtype=np.float32) if variant.abft else None
    verdicts = run_injections(a, b, variant, gc, ges, rows, progress=progress, rel_errors=errs)
    return InKernelResult(variant, dims, scope, seed, rows, verdicts, time.perf_counter() - start,
                          errs)
