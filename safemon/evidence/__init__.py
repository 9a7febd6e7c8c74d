"""The safety evidence: DC campaigns, the evidence files and store, selection, plots.

Modules: `campaign` (exhaustive input campaigns, NumPy and GPU), `inkernel` (sampled
register-level fault campaigns, GPU, through `safemon.faults.launch`), `store` (JSON schema
and per-device store), `inkernel_schema` (the in-kernel schema: dangerous, detected, safe),
`bounds` (Clopper–Pearson lower bounds), `coverage` (a variant's selection DC: the min of
four lower bounds), `select` (IEC 61508-2 requirement table and selection rule),
`committed` (finding the committed evidence), `seed_table3` (the seed's Table 3 GPU column),
`plot` (DC-vs-overhead PNG). Matrix sizes are `safemon.dims`; the overhead benchmark that
writes bench evidence is `safemon.bench.overhead`. docs/SAFETY.md explains how to read the
evidence.
"""

from safemon.dims import BENCH_DIMS, SEED_DC_DIMS, Dims, parse_dims
from safemon.evidence.campaign import (
    C_DIFFERS,
    ES_DIFFERS,
    CampaignResult,
    brute_force_verdict,
    inputs_for,
    parse_variants,
    run_input_campaign,
)
from safemon.evidence.select import REQUIREMENTS, requirement, select_variant, selection_table
from safemon.evidence.store import EvidenceError, EvidenceStore, load_evidence, write_evidence

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
