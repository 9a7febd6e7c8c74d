"""Evidence files: schema validation, round trips, and the per-device store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safemon.dims import Dims
from safemon.evidence.campaign import parse_variants, run_input_campaign
from safemon.evidence.store import (
    BenchEvidence,
    DcEvidence,
    EvidenceError,
    EvidenceStore,
    dc_evidence,
    dc_table_markdown,
    device_slug,
    load_evidence,
    write_evidence,
)
from tests.evidence.helpers import DEVICE, bench_doc, bench_row, dc_doc, dc_rec


def _write(tmp_path: Path, doc: dict, name: str = "e.json") -> Path:  # type: ignore[type-arg]
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_campaign_evidence_round_trips(tmp_path: Path) -> None:
    v = parse_variants("twos/M", "exact", "small")[0]
    r = run_input_campaign(v, Dims(8, 12, 4), seed=1)
    ev = dc_evidence([r], device="cpu", backend="numpy", seed=1)
    path = write_evidence(ev, tmp_path / "sub" / "dc.json")
    back = load_evidence(path)
    assert isinstance(back, DcEvidence) and back == ev
    data = json.loads(path.read_text())
    rec = data["results"][0]
    for key in ("variant", "dims", "injections", "detected_es", "visible_c", "dc_percent"):
        assert key in rec
    assert rec["injections"] == r.injections and rec["detected_es"] == r.detected_es
    assert data["schema"] == "safemon.dc/2" and data["seed"] == 1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dc_percent", 99.0, "dc_percent"),
        ("injections", 1000, "exhaustive"),
        ("latent", 5, "add up"),
        ("detected_es", 10**9, "exceeds"),
        ("dims", "80x80", "dims"),
        ("mode", "fast", "mode"),
        ("surprise", 1, "surprise"),
    ],
)
def test_inconsistent_dc_records_are_rejected(tmp_path: Path, field: str, value: object, message: str) -> None:
    rec = dc_rec("ones/I", 100.0)
    rec[field] = value
    with pytest.raises(EvidenceError, match=message):
        load_evidence(_write(tmp_path, dc_doc([rec])))


def test_bench_ratios_must_match_medians(tmp_path: Path) -> None:
    good = bench_row("ones/I", 1.5)
    assert isinstance(load_evidence(_write(tmp_path, bench_doc([good]))), BenchEvidence)
    bad = dict(good, overhead=1.2)
    with pytest.raises(EvidenceError, match="overhead"):
        load_evidence(_write(tmp_path, bench_doc([bad])))
    bad = dict(good, tflops_cublas=1.0)
    with pytest.raises(EvidenceError, match="tflops_cublas"):
        load_evidence(_write(tmp_path, bench_doc([bad])))


def test_unreadable_files_raise_evidence_error(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="no such"):
        load_evidence(tmp_path / "missing.json")
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(EvidenceError, match="JSON"):
        load_evidence(p)
    with pytest.raises(EvidenceError, match="unknown schema"):
        load_evidence(_write(tmp_path, {"schema": "other/1"}))
    with pytest.raises(EvidenceError, match="object"):
        load_evidence(_write(tmp_path, [1, 2]))  # type: ignore[arg-type]


def test_store_keeps_devices_apart_and_newer_wins(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    old = DcEvidence.model_validate(dc_doc([dc_rec("ones/I", 90.0)], date="2026-01-01T00:00:00Z"))
    new = DcEvidence.model_validate(
        dc_doc([dc_rec("ones/I", 100.0, dims="20x20x20")], date="2026-02-01T00:00:00Z"))
    store.save_dc(old)
    store.save_dc(new)
    newer_same_key = old.model_copy(update={"date": "2026-03-01T00:00:00Z",
                                            "results": [DcEvidence.model_validate(dc_doc([dc_rec("ones/I", 95.0)])).results[0]]})
    (store.device_dir(DEVICE) / "dc_second.json").write_text(
        json.dumps(newer_same_key.model_dump(mode="json", by_alias=True)))
    store.save_bench(BenchEvidence.model_validate(bench_doc([bench_row("ones/I", 1.5)])))
    assert store.devices() == [device_slug(DEVICE)]
    dc = store.dc_records(DEVICE)
    assert dc[("ones/I/fma/small", "80x80x80")].dc_percent == pytest.approx(95.0, abs=0.01)
    assert ("ones/I/fma/small", "20x20x20") in dc
    assert store.bench_rows(DEVICE)[("ones/I/fma/small", "80x80x80")].overhead == pytest.approx(1.5)
    with pytest.raises(EvidenceError, match="no evidence for device"):
        store.dc_records("Other GPU")


def test_dc_table_markdown_has_variants_by_sizes() -> None:
    recs = [DcEvidence.model_validate(dc_doc([dc_rec("ones/I", 100.0), dc_rec("xor/M", 50.0, dims="20x20x20")])).results]
    md = dc_table_markdown(recs[0])
    assert "| variant | 20² | 80² |" in md
    assert "| ones/I/fma/small | — | 100.0 |" in md


def test_device_slug() -> None:
    assert device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    with pytest.raises(EvidenceError):
        device_slug("///")


def test_schema_1_files_are_refused_not_read_as_the_paper_levels(tmp_path: Path) -> None:
    """A schema 1 "M"/"E" record (today's F/T) is never taken for the paper's M/E."""
    data = dc_doc([dc_rec("ones/M", 70.0)])
    data["schema"] = "safemon.dc/1"
    with pytest.raises(EvidenceError, match="predates the paper's levels"):
        load_evidence(_write(tmp_path, data))


def test_bench_rows_may_carry_the_kernel_schedules(tmp_path: Path) -> None:
    """Rows record (lane map, MAC order) of both builds since stop 48; older rows have none."""
    row = dict(bench_row("ones/I", 1.5), schedule=[0, 0], unprotected_schedule=[1, 1])
    loaded = load_evidence(_write(tmp_path, bench_doc([row])))
    assert isinstance(loaded, BenchEvidence)
    assert loaded.rows[0].schedule == (0, 0) and loaded.rows[0].unprotected_schedule == (1, 1)
    old = load_evidence(_write(tmp_path, bench_doc([bench_row("ones/I", 1.5)])))
    assert isinstance(old, BenchEvidence) and old.rows[0].schedule is None
    with pytest.raises(EvidenceError, match="schedule"):
        load_evidence(_write(tmp_path, bench_doc([dict(row, schedule=[0, 1, 2])])))
