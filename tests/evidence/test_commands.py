"""The dc and select sub-commands end to end on the NumPy backend; bench on a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safemon.commands import bench as bench_cmd
from safemon.commands import dc as dc_cmd
from safemon.commands import select as select_cmd
from safemon.evidence.store import BenchEvidence, EvidenceStore, load_evidence
from tests.evidence.helpers import (
    CATALOG,
    DEVICE,
    bench_doc,
    bench_row,
    dc_doc,
    dc_rec,
    ik_doc,
    ik_rec,
)


def test_dc_command_writes_json_and_stores_evidence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dc.json"
    rc = dc_cmd.main(["--variants", "twos/E,ones/M", "--dims", "8x12x4", "--backend", "numpy",
                      "--seed", "2", "--json", str(out), "--evidence", str(tmp_path / "ev"),
                      "--markdown", str(tmp_path / "dc.md"), "--no-progress"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert [r["variant"] for r in data["results"]] == ["twos/E", "ones/M"]
    assert data["results"][0]["injections"] == 32 * (8 * 4 + 4 * 12)
    assert "DC(ES)" in capsys.readouterr().out
    assert EvidenceStore(tmp_path / "ev").devices()
    assert "| variant |" in (tmp_path / "dc.md").read_text()


def test_dc_command_rejects_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert dc_cmd.main(["--variants", "bogus/I", "--backend", "numpy"]) == 2
    assert dc_cmd.main(["--dims", "3x4", "--backend", "numpy"]) == 2
    assert "safemon dc:" in capsys.readouterr().err


def _store(tmp_path: Path) -> Path:
    root = tmp_path / "ev"
    d = EvidenceStore(root).device_dir(DEVICE)
    d.mkdir(parents=True)
    (d / "dc_a.json").write_text(json.dumps(dc_doc([dc_rec(v, x) for v, x, _ in CATALOG])))
    (d / "bench_a.json").write_text(json.dumps(bench_doc([bench_row(v, o) for v, _, o in CATALOG])))
    # Every catalog variant has its three in-kernel campaigns, except crc32c/I (blind).
    ik = [ik_rec(v, sc, 3000, 3000) for v, _, _ in CATALOG for sc in ("transient", "thread", "block")
          if v != "crc32c/I"]
    (d / "inkernel_a.json").write_text(json.dumps(ik_doc(ik)))
    return root


def _config(tmp_path: Path, checksum: str, level: str) -> Path:
    p = tmp_path / "deploy.yaml"
    p.write_text(f"name: t\npolicy: 1oo1D\nbackend: numpy\nchannels:\n  - name: ch0\n"
                 f"    variant: {{checksum: {checksum}, level: {level}, mode: fma, tile: small}}\n")
    return p


def test_select_json_reports_every_figure_with_bound_and_size(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _store(tmp_path)
    rc = select_cmd.main(["--sil", "3", "--hft", "0", "--dims", "80", "--evidence", str(root),
                          "--device", DEVICE, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["variant"] == "ones/I/fma/small"
    figs = {f["source"]: f for f in doc["coverage"]["figures"]}
    assert set(figs) == {"input-flip", "in-kernel transient", "in-kernel thread", "in-kernel block"}
    assert figs["in-kernel block"]["dangerous"] == 3000 and figs["input-flip"]["dangerous"] == 409600
    assert all(f["dc_lower_percent"] <= f["dc_percent"] for f in figs.values())
    assert doc["not_selectable"][0]["variant"] == "crc32c/I/fma/small"


def test_select_config_checks_the_deployment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1oo1D is HFT 0: ones/I meets SIL 3, ones/M (62 %) falls short, crc32c/I has no
    in-kernel evidence and falls short with the campaign to run."""
    root = _store(tmp_path)
    base = ["--sil", "3", "--dims", "80", "--evidence", str(root), "--device", DEVICE, "--config"]
    assert select_cmd.main([*base, str(_config(tmp_path, "ones", "I"))]) == 0
    assert "meets the SIL" in capsys.readouterr().out
    assert select_cmd.main([*base, str(_config(tmp_path, "ones", "M"))]) == 1
    assert "SHORT" in capsys.readouterr().out
    assert select_cmd.main([*base, str(_config(tmp_path, "crc32c", "I"))]) == 1
    assert "--inkernel 3000" in capsys.readouterr().out


def test_select_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _store(tmp_path)
    rc = select_cmd.main(["--sil", "3", "--hft", "0", "--dims", "80", "--evidence", str(root),
                          "--device", DEVICE])
    assert rc == 0
    assert "ones/I/fma/small" in capsys.readouterr().out
    rc = select_cmd.main(["--sil", "4", "--hft", "0", "--dims", "80", "--evidence", str(root),
                          "--device", DEVICE])
    assert rc == 1
    assert "not achievable" in capsys.readouterr().out


def test_select_report_writes_tables_and_plot(tmp_path: Path) -> None:
    root = _store(tmp_path)
    rep = tmp_path / "report"
    rc = select_cmd.main(["--dims", "80", "--evidence", str(root), "--device", DEVICE,
                          "--table", "--report", str(rep)])
    assert rc == 0
    for name in ("table3_dc.md", "table3_dc.json", "table3_vs_seed.md", "table4_selection.md",
                 "table4_selection.json", "tradeoff.png"):
        assert (rep / name).stat().st_size > 0
    assert len(json.loads((rep / "table4_selection.json").read_text())) == 12


def test_select_without_evidence_is_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = select_cmd.main(["--sil", "1", "--hft", "0", "--dims", "80", "--evidence",
                          str(tmp_path), "--device", "none"])
    assert rc == 2
    assert "no evidence" in capsys.readouterr().err


@pytest.mark.gpu
def test_quick_bench_produces_a_well_formed_report(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    rc = bench_cmd.main(["--dims", "80,18x2304x64", "--modes", "fma", "--variants", "ones/I,xor/M",
                         "--repeats", "5", "--warmup", "2", "--no-ecc", "--json", str(out),
                         "--markdown", str(tmp_path / "b.md")])
    assert rc == 0
    ev = load_evidence(out)
    assert isinstance(ev, BenchEvidence)
    assert {(r.variant, r.dims) for r in ev.rows} == {
        (v, d) for v in ("ones/I", "xor/M") for d in ("80x80x80", "18x2304x64")}
    assert "Overhead" in (tmp_path / "b.md").read_text()


@pytest.mark.gpu
def test_bench_times_the_rmt_and_abft_variants_by_their_labels(tmp_path: Path) -> None:
    """`safemon bench --variants` takes the checked labels; each row is timed against the
    unprotected kernel of the same run and keeps its label (for `safemon select`)."""
    out = tmp_path / "bench.json"
    labels = ("unprotected/rmt-warp", "ones/M/abft", "ones/M/rmt-warp/abft")
    rc = bench_cmd.main(["--dims", "80,64x4096x4096", "--modes", "fma", "--variants",
                         ",".join(labels), "--repeats", "5", "--warmup", "2", "--no-ecc",
                         "--api-dims", "none", "--json", str(out)])
    assert rc == 0
    ev = load_evidence(out)
    assert isinstance(ev, BenchEvidence)
    assert {(r.variant, r.dims) for r in ev.rows} == {
        (v, d) for v in labels for d in ("80x80x80", "64x4096x4096")}
    assert all(r.overhead > 0 for r in ev.rows)


def test_select_without_evidence_finds_the_newest_readable_committed_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A newer set written with schema 1 is skipped, never reinterpreted; the command says
    which set it used."""
    import safemon.evidence.committed as committed

    base = tmp_path / "evidence"
    good = _store(base / "a-2026-01-01")
    (base / "a-2026-01-01" / "ev").rename(base / "a-2026-01-01" / "store")
    old = EvidenceStore(base / "z-2025-old" / "store").device_dir(DEVICE)
    old.mkdir(parents=True)
    doc = dc_doc([dc_rec("ones/M", 70.0)])
    doc["schema"] = "safemon.dc/1"
    (old / "dc_old.json").write_text(json.dumps(doc))
    monkeypatch.setattr(committed, "repository_evidence_dir", lambda: base)
    rc = select_cmd.main(["--sil", "3", "--hft", "0", "--dims", "80", "--device", DEVICE])
    out = capsys.readouterr()
    assert rc == 0 and "ones/I/fma/small" in out.out
    assert "a-2026-01-01/store" in out.err and good.name == "ev"
