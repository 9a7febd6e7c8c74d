"""The golden-pattern file store: reproducible builds, the built-in store, refusal of
tampered or malformed stores, `verify_patterns` and the `safemon patterns` CLI."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from safemon.commands import patterns as patterns_cmd
from safemon.config import Config, load_config
from safemon.errors import PatternError
from safemon.golden_store import (
    BUILTIN_DIR,
    MANIFEST_NAME,
    build_patterns,
    load_patterns,
    verify_patterns,
)
from safemon.golden_store import store as golden
from safemon.kernels.api import run_variant
from safemon.kernels.catalog import make_variant
from safemon.patterns.golden import (
    FAMILIES,
    GoldenPattern,
    find_pattern,
    generate_inputs,
    make_pattern,
)

ROOT = Path(__file__).resolve().parents[2]
V_SMALL = make_variant("ones", "T", "fma", "small")


def _config(tmp_path: Path, **patterns: Any) -> Config:
    cfg = tmp_path / "cfg.yaml"
    section = {k: (str(v) if isinstance(v, Path) else v) for k, v in patterns.items()}
    cfg.write_text(json.dumps({"patterns": section}), encoding="utf-8")
    return load_config(cfg, env={})


def _flip(x: np.ndarray[Any, Any], flat_index: int, bit: int) -> np.ndarray[Any, Any]:
    out = np.array(x, copy=True)
    out.reshape(-1).view(np.uint32)[flat_index] ^= np.uint32(1 << bit)
    return out


# ---------------------------------------------------------------------------- store


def test_build_is_byte_reproducible(tmp_path: Path) -> None:
    """Two builds write identical bytes (so SHA-256 sums are stable across machines)."""
    m1 = build_patterns(tmp_path / "one", ["8x8x8"], [V_SMALL])
    m2 = build_patterns(tmp_path / "two", [(8, 8, 8)], [V_SMALL])
    assert m1.read_bytes() == m2.read_bytes()
    for f in (tmp_path / "one").glob("*.npz"):
        assert f.read_bytes() == (tmp_path / "two" / f.name).read_bytes()
    assert len(list((tmp_path / "one").glob("*.npz"))) == len(FAMILIES)


def test_builtin_store_matches_a_fresh_build_and_is_small(tmp_path: Path) -> None:
    """The shipped store is exactly what the generator builds for the embedded default."""
    cfg = load_config(None, env={})
    manifest = build_patterns(
        tmp_path, cfg.patterns.dims, [ch.variant for ch in cfg.channels or []]
    )
    assert manifest.read_bytes() == (BUILTIN_DIR / MANIFEST_NAME).read_bytes()
    total = sum(p.stat().st_size for p in BUILTIN_DIR.iterdir() if p.is_file())
    assert total < 200_000
    assert verify_patterns(BUILTIN_DIR) == []


def test_store_files_ship_as_package_data() -> None:
    """pyproject's package data globs cover the store's files, and data/ is a package."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = meta["tool"]["setuptools"]["package-data"]["*"]
    assert "*.npz" in globs and "*.json" in globs
    assert (BUILTIN_DIR / "__init__.py").is_file()
    assert (BUILTIN_DIR / MANIFEST_NAME).is_file()
    assert list(BUILTIN_DIR.glob("*.npz"))


def test_load_patterns_default_uses_builtin_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded default loads its four patterns from the store, generating nothing."""

    def no_generation(*args: Any, **kwargs: Any) -> GoldenPattern:
        raise AssertionError("generated although the store holds the pattern")

    monkeypatch.setattr(golden, "make_pattern", no_generation)
    pats = load_patterns(load_config(None, env={}))
    assert [p.id for p in pats] == [f"{f}-16x16x16" for f in FAMILIES]
    assert {p.family for p in pats} == set(FAMILIES)
    for p in pats:
        assert p.variant == V_SMALL
        res = run_variant(np.array(p.a), np.array(p.b), p.variant, backend="numpy")
        assert p.check(res.c, res.es)


def test_load_patterns_builds_missing_ones_in_memory(tmp_path: Path) -> None:
    """A shape or variant the store lacks is generated, equal to make_pattern's."""
    store = tmp_path / "store"
    build_patterns(store, ["16x16x16"], [V_SMALL])
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(
        json.dumps(
            {
                "patterns": {"dir": str(store), "dims": ["16x16x16", "8x4x12"]},
                "channels": [
                    {"name": "a"},
                    {"name": "b"},
                    {"name": "c", "variant": {"checksum": "crc32c", "level": "E", "mode": "fma"}},
                ],
            }
        ),
        encoding="utf-8",
    )
    pats = load_patterns(load_config(cfg_file, env={}))
    v_crc = make_variant("crc32c", "E", "fma", "small")
    assert len(pats) == 2 * 2 * len(FAMILIES)  # dims × distinct variants × families
    keys = {p.key for p in pats}
    assert len(keys) == len(pats)
    for dims in ("16x16x16", "8x4x12"):
        for fam in FAMILIES:
            for v in (V_SMALL, v_crc):
                p = find_pattern(pats, f"{fam}-{dims}", v)
                ref = make_pattern(fam, dims, v)
                assert p.check(ref.expected_c, ref.expected_es)
    with pytest.raises(PatternError, match="no golden pattern"):
        find_pattern(pats, "random-16x16x16", make_variant("xor", "I", "exact", "small"))


def _store(tmp_path: Path) -> tuple[Path, Config]:
    store = tmp_path / "store"
    build_patterns(store, ["16x16x16"], [V_SMALL])
    return store, _config(tmp_path, dir=store)


def test_tampered_file_refuses_loading_and_names_it(tmp_path: Path) -> None:
    """One changed byte in a pattern file → PatternError naming that file."""
    store, cfg = _store(tmp_path)
    victim = store / "walking-16x16x16--ones-T-fma-small.npz"
    data = bytearray(victim.read_bytes())
    data[-200] ^= 0x01
    victim.write_bytes(bytes(data))
    with pytest.raises(PatternError, match=r"walking-16x16x16--ones-T-fma-small\.npz.*SHA-256"):
        load_patterns(cfg)


def test_missing_file_refuses_loading_and_names_it(tmp_path: Path) -> None:
    """A file listed in the manifest but absent → PatternError naming it."""
    store, cfg = _store(tmp_path)
    (store / "extremes-16x16x16--ones-T-fma-small.npz").unlink()
    with pytest.raises(PatternError, match=r"extremes-16x16x16--ones-T-fma-small\.npz.*missing"):
        load_patterns(cfg)


def test_tampering_an_unconfigured_pattern_still_refuses_loading(tmp_path: Path) -> None:
    """Every listed file is checked, not only the ones the config uses."""
    store = tmp_path / "store"
    build_patterns(store, ["16x16x16", "4x4x4"], [V_SMALL])
    cfg = _config(tmp_path, dir=store, dims=["16x16x16"])
    (store / "random-4x4x4--ones-T-fma-small.npz").write_bytes(b"not a pattern")
    with pytest.raises(PatternError, match=r"random-4x4x4"):
        load_patterns(cfg)


def test_missing_or_invalid_manifest_refuses_loading(tmp_path: Path) -> None:
    """No manifest, broken JSON, a path escaping the store, another generator version."""
    store, cfg = _store(tmp_path)
    manifest = store / MANIFEST_NAME
    original = manifest.read_text(encoding="utf-8")
    manifest.unlink()
    with pytest.raises(PatternError, match=r"manifest\.json.*missing"):
        load_patterns(cfg)
    manifest.write_text("{not json", encoding="utf-8")
    with pytest.raises(PatternError, match="unreadable"):
        load_patterns(cfg)
    doc = json.loads(original)
    doc["patterns"][0]["file"] = "../elsewhere.npz"
    manifest.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(PatternError, match=r"bare \.npz name"):
        load_patterns(cfg)
    doc = json.loads(original)
    doc["generator_version"] = golden.GENERATOR_VERSION + 1
    manifest.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(PatternError, match="generator version"):
        load_patterns(cfg)


def test_pickled_arrays_are_refused(tmp_path: Path) -> None:
    """An object array (needs pickle) in a file with a matching SHA-256 is still refused."""
    store, cfg = _store(tmp_path)
    name = "random-16x16x16--ones-T-fma-small.npz"
    with np.load(store / name, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["a"] = np.array([object()] * 4, dtype=object)
    np.savez(store / name, **arrays)
    doc = json.loads((store / MANIFEST_NAME).read_text(encoding="utf-8"))
    for e in doc["patterns"]:
        if e["file"] == name:
            e["sha256"] = hashlib.sha256((store / name).read_bytes()).hexdigest()
    (store / MANIFEST_NAME).write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(PatternError, match="malformed"):
        load_patterns(cfg)


def _resign(store: Path, name: str) -> None:
    doc = json.loads((store / MANIFEST_NAME).read_text(encoding="utf-8"))
    for e in doc["patterns"]:
        if e["file"] == name:
            e["sha256"] = hashlib.sha256((store / name).read_bytes()).hexdigest()
    (store / MANIFEST_NAME).write_text(json.dumps(doc), encoding="utf-8")


def test_verify_lists_every_problem(tmp_path: Path) -> None:
    """verify reports tampering, absence, wrong expected values and unlisted files, by file."""
    store, _ = _store(tmp_path)
    assert verify_patterns(store) == []
    # 1. tampered bytes
    t = store / "random-16x16x16--ones-T-fma-small.npz"
    raw = bytearray(t.read_bytes())
    raw[-100] ^= 0x40
    t.write_bytes(bytes(raw))
    # 2. missing
    (store / "walking-16x16x16--ones-T-fma-small.npz").unlink()
    # 3. a wrong expected C whose SHA-256 was updated to match (a store built on a faulty machine)
    w = store / "checkerboard-16x16x16--ones-T-fma-small.npz"
    with np.load(w, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["expected_c"] = _flip(arrays["expected_c"], 5, 3)
    w.write_bytes(golden._npz_bytes(arrays))
    _resign(store, w.name)
    # 4. an unlisted file
    shutil.copy(store / "extremes-16x16x16--ones-T-fma-small.npz", store / "stray.npz")
    problems = verify_patterns(store)
    assert len(problems) == 4, problems
    text = "\n".join(problems)
    assert "random-16x16x16" in text and "SHA-256" in text
    assert "walking-16x16x16" in text and "missing" in text
    assert "checkerboard-16x16x16" in text and "reference" in text
    assert "stray.npz" in text and "not listed" in text


def test_verify_reports_inputs_that_differ_from_the_generator(tmp_path: Path) -> None:
    """Consistent but foreign inputs (expected values recomputed to match) are still reported."""
    store, _ = _store(tmp_path)
    f = store / "random-16x16x16--ones-T-fma-small.npz"
    a, b = generate_inputs("random", (16, 16, 16))
    a = _flip(a, 0, 0)
    res = run_variant(a, b, V_SMALL, backend="numpy")
    f.write_bytes(golden._npz_bytes({"a": a, "b": b, "expected_c": res.c, "expected_es": res.es}))
    _resign(store, f.name)
    assert [p for p in verify_patterns(store) if "differ from the generator" in p]


def test_verify_without_manifest(tmp_path: Path) -> None:
    """An empty directory is one problem: the missing manifest."""
    problems = verify_patterns(tmp_path)
    assert len(problems) == 1 and "missing" in problems[0]


# ---------------------------------------------------------------------------- CLI


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="safemon")
    sub = parser.add_subparsers(dest="command")
    patterns_cmd.register(sub)
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_cli_build_then_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """build writes a verifiable store (exit 0); tampering makes verify exit 1."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("patterns:\n  dims: [8x8x8]\n", encoding="utf-8")
    store = tmp_path / "store"
    assert _cli(["patterns", "build", "--dir", str(store), "--config", str(cfg)]) == 0
    assert (store / MANIFEST_NAME).is_file()
    assert _cli(["patterns", "verify", "--dir", str(store)]) == 0
    (store / "random-8x8x8--ones-T-fma-small.npz").write_bytes(b"x")
    capsys.readouterr()
    assert _cli(["patterns", "verify", "--dir", str(store)]) == 1
    assert "random-8x8x8--ones-T-fma-small.npz" in capsys.readouterr().out


def test_cli_verify_builtin_store() -> None:
    """verify without --dir checks the built-in store, which is sound."""
    assert _cli(["patterns", "verify"]) == 0


def test_cli_bad_usage_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No output directory, a bad config, a non-directory, or no action → exit 2."""
    monkeypatch.delenv("SAFEMON_CONFIG", raising=False)
    assert _cli(["patterns", "build"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("patterns:\n  dims: [nope]\n", encoding="utf-8")
    assert _cli(["patterns", "build", "--config", str(bad), "--dir", str(tmp_path)]) == 2
    f = tmp_path / "file"
    f.write_text("", encoding="utf-8")
    assert _cli(["patterns", "verify", "--dir", str(f)]) == 2
    assert _cli(["patterns", "build", "--dir", str(f)]) == 2
    assert _cli(["patterns"]) == 2


@pytest.mark.parametrize("tile", ["small", "large", "wide", "skinny"])
def test_a_stored_variant_reads_back_as_the_catalog_tile_the_channels_run(tile: str) -> None:
    """A pattern's variant resolves to the catalog's own tile entry, implementation choices
    included (asynchronous copies of wide and skinny), so a self-test runs the production
    kernel build rather than an equal-looking register-staged one."""
    from safemon.kernels.catalog import TILES

    v = make_variant("ones", "M", "exact", tile)
    back = golden._variant_from_dict(json.loads(json.dumps(v.as_dict())))
    assert back == v
    assert back.tile is TILES[tile] and back.tile.async_copy == TILES[tile].async_copy
