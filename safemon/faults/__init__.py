"""Fault injection and the evidence it produces: DC campaigns, overhead benchmark, selection.

Modules: `campaign` (exhaustive input campaigns, NumPy and GPU), `inkernel` (sampled
register-level faults, GPU), `launch` (the injection build's launcher), `evidence` (JSON
schema and per-device store), `inkernel_evidence` (the in-kernel schema: dangerous, detected,
safe), `bounds` (Clopper–Pearson lower bounds), `coverage` (a variant's selection DC: the min
of four lower bounds), `select` (IEC 61508-2 requirement table and selection rule),
`committed` (finding the committed evidence), `seed_table3` (the seed's Table 3 GPU column),
`bench` (overhead benchmark, GPU), `plot` (DC-vs-overhead PNG), `dims` (matrix sizes).
docs/SAFETY.md explains how to read the evidence.
"""

from safemon.faults.campaign import (
    C_DIFFERS,
    ES_DIFFERS,
    CampaignResult,
    brute_force_verdict,
    inputs_for,
    parse_variants,
    run_input_campaign,
)
from safemon.faults.dims import BENCH_DIMS, SEED_DC_DIMS, Dims, parse_dims
from safemon.faults.evidence import EvidenceError, EvidenceStore, load_evidence, write_evidence
from safemon.faults.select import REQUIREMENTS, requirement, select_variant, selection_table

__all__ = [
    "BENCH_DIMS",
    "C_DIFFERS",
    "ES_DIFFERS",
    "REQUIREMENTS",
    "SEED_DC_DIMS",
    "CampaignResult",
    "Dims",
    "EvidenceError",
    "EvidenceStore",
    "brute_force_verdict",
    "inputs_for",
    "load_evidence",
    "parse_dims",
    "parse_variants",
    "requirement",
    "run_input_campaign",
    "select_variant",
    "selection_table",
    "write_evidence",
]
