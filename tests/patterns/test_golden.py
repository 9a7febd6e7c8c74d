"""Golden patterns: deterministic generation, bit-exact checks, the store and its CLI."""

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
from safemon.kernels.api import run_variant
from safemon.kernels.catalog import make_variant
from safemon.patterns import golden
from safemon.patterns.golden import (
    BUILTIN_DIR,
    FAMILIES,
    MANIFEST_NAME,
    GoldenPattern,
    build_patterns,
    find_pattern,
    generate_inputs,
    load_patterns,
    make_pattern,
    verify_patterns,
)

ROOT = Path(__file__).resolve().parents[2]
V_SMALL = make_variant("ones", "I", "exact", "small")


def _config(tmp_path: Path, **patterns: Any) -> Config:
    cfg = tmp_path / "cfg.yaml"
    section = {k: (str(v) if isinstance(v, Path) else v) for k, v in patterns.items()}
    cfg.write_text(json.dumps({"patterns": section}), encoding="utf-8")
    return load_config(cfg, env={})


def _bits(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(x).view(np.uint32)


def _flip(x: np.ndarray[Any, Any], flat_index: int, bit: int) -> np.ndarray[Any, Any]:
    out = np.array(x, copy=True)
    out.reshape(-1).view(np.uint32)[flat_index] ^= np.uint32(1 << bit)
    return out


# ---------------------------------------------------------------------------- generator


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dims", [(16, 16, 16), (5, 3, 7), (1, 1, 1), (33, 40, 64)])
def test_generation_is_deterministic_finite_float32(
    family: str, dims: tuple[int, int, int]
) -> None:
    """Same family and dims give bit-identical, finite, C-contiguous float32 inputs."""
    a1, b1 = generate_inputs(family, dims)
    a2, b2 = generate_inputs(family, "x".join(map(str, dims)))
    m, n, k = dims
    assert a1.shape == (m, k) and b1.shape == (k, n)
    assert a1.dtype == np.float32 and b1.dtype == np.float32
    assert a1.flags.c_contiguous and b1.flags.c_contiguous
    assert np.isfinite(a1).all() and np.isfinite(b1).all()
    assert np.array_equal(_bits(a1), _bits(a2)) and np.array_equal(_bits(b1), _bits(b2))


def test_families_differ() -> None:
    """Each family yields different inputs for the same shape."""
    seen = {
        family: _bits(generate_inputs(family, (16, 16, 16))[0]).tobytes() for family in FAMILIES
    }
    assert len(set(seen.values())) == len(FAMILIES)


def test_walking_ones_cover_every_mantissa_and_exponent_bit() -> None:
    """Every bit 0..30 is set in some A element and clear in another (both operands)."""
    for x in generate_inputs("walking", (16, 16, 16)):
        bits = _bits(x).reshape(-1)
        for bit in range(31):
            set_ = (bits >> np.uint32(bit)) & np.uint32(1)
            assert set_.any() and not set_.all(), bit
        # one-hot exponent fields: each exponent bit alone, mantissa zero
        exps = {int(w >> 23) & 0xFF for w in bits if (int(w) & 0x7FFFFF) == 0}
        assert {1 << e for e in range(8)} <= exps


def test_checkerboard_neighbours_are_complements() -> None:
    """Horizontally adjacent elements are bitwise complements, so every lane toggles."""
    a, b = generate_inputs("checkerboard", (8, 8, 8))
    for x in (a, b):
        w = _bits(x)
        assert np.array_equal(w[:, 1:], ~w[:, :-1])
        assert {int(v) for v in w.reshape(-1)} <= {0x55555555, 0xAAAAAAAA, 0x33333333, 0xCCCCCCCC}


def test_extremes_contain_subnormals_zeros_and_large_exponents() -> None:
    """Inputs hold ±0, subnormals, FLT_MAX-scale values; C has subnormal results, no inf."""
    a, b = generate_inputs("extremes", (16, 16, 16))
    both = np.concatenate([a.reshape(-1), b.reshape(-1)])
    w = _bits(both)
    assert (w == 0).any() and (w == 0x80000000).any()
    assert ((np.abs(both) < np.finfo(np.float32).tiny) & (both != 0)).any()
    assert (np.abs(both) >= 2.0**100).any()
    assert (w == 0x7F7FFFFF).any()
    c = make_pattern("extremes", (16, 16, 16), V_SMALL).expected_c
    assert np.isfinite(c).all()
    assert ((np.abs(c) < np.finfo(np.float32).tiny) & (c != 0)).any()
    assert (np.abs(c) > 1e30).any()


def test_overflowing_inputs_are_refused() -> None:
    """The overflow guard is live: inputs whose product could overflow raise."""
    big = np.full((2, 2), 3e38, dtype=np.float32)
    with pytest.raises(AssertionError, match="overflow"):
        golden._check_no_overflow(big, big, "test")


def test_unknown_family_and_bad_dims_raise() -> None:
    """Unknown families and malformed dims are refused, not guessed."""
    with pytest.raises(ValueError, match="unknown golden pattern family"):
        generate_inputs("zeros", (2, 2, 2))
    with pytest.raises(ValueError, match="MxNxK"):
        generate_inputs("random", "2x2")
    with pytest.raises(ValueError, match="positive"):
        generate_inputs("random", (2, 0, 2))


# ---------------------------------------------------------------------------- check


@pytest.mark.parametrize("family", FAMILIES)
def test_check_accepts_reference_result_and_rejects_one_bit_flips(family: str) -> None:
    """check() passes the reference's own C/ES and fails on any single flipped bit of C or ES."""
    variant = make_variant("fletcher", "M", "fma", "small")
    p = make_pattern(family, (16, 16, 16), variant)
    res = run_variant(p.a, p.b, variant, backend="numpy")
    assert p.check(res.c, res.es)
    rng = np.random.default_rng(7)
    for bit in (0, 22, 23, 30, 31):
        i = int(rng.integers(p.expected_c.size))
        assert not p.check(_flip(res.c, i, bit), res.es), (family, "c", bit)
    for bit in (0, 15, 31):
        i = int(rng.integers(p.expected_es.size))
        assert not p.check(res.c, _flip(res.es, i, bit)), (family, "es", bit)


def test_check_distinguishes_signed_zeros() -> None:
    """+0 and -0 differ in one bit, so check() treats them as different results."""
    p = make_pattern("extremes", (3, 3, 2), V_SMALL)
    c = np.array(p.expected_c)
    zero = np.flatnonzero(c.reshape(-1) == 0)
    assert zero.size, "the small extremes pattern has zero outputs"
    assert not p.check(_flip(c, int(zero[0]), 31), p.expected_es)


def test_check_rejects_wrong_shape_dtype_and_non_arrays() -> None:
    """A wrong shape or dtype is a failed check; a non-array is a TypeError."""
    p = make_pattern("random", (16, 16, 16), V_SMALL)
    assert not p.check(p.expected_c.astype(np.float64), p.expected_es)
    assert not p.check(p.expected_c[:, :8], p.expected_es)
    assert not p.check(p.expected_c, p.expected_es.astype(np.int64))
    with pytest.raises(TypeError, match="NumPy or CuPy"):
        p.check(p.expected_c.tolist(), p.expected_es)


def test_pattern_arrays_are_read_only() -> None:
    """A consumer cannot overwrite the reference it is checked against."""
    p = make_pattern("random", (4, 4, 4), V_SMALL)
    for name in ("a", "b", "expected_c", "expected_es"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(p, name)[0, 0] = 1
    assert p.dims == (4, 4, 4)
    assert p.id == "random-4x4x4"


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
    victim = store / "walking-16x16x16--ones-I-exact-small.npz"
    data = bytearray(victim.read_bytes())
    data[-200] ^= 0x01
    victim.write_bytes(bytes(data))
    with pytest.raises(PatternError, match=r"walking-16x16x16--ones-I-exact-small\.npz.*SHA-256"):
        load_patterns(cfg)


def test_missing_file_refuses_loading_and_names_it(tmp_path: Path) -> None:
    """A file listed in the manifest but absent → PatternError naming it."""
    store, cfg = _store(tmp_path)
    (store / "extremes-16x16x16--ones-I-exact-small.npz").unlink()
    with pytest.raises(PatternError, match=r"extremes-16x16x16--ones-I-exact-small\.npz.*missing"):
        load_patterns(cfg)


def test_tampering_an_unconfigured_pattern_still_refuses_loading(tmp_path: Path) -> None:
    """Every listed file is checked, not only the ones the config uses."""
    store = tmp_path / "store"
    build_patterns(store, ["16x16x16", "4x4x4"], [V_SMALL])
    cfg = _config(tmp_path, dir=store, dims=["16x16x16"])
    (store / "random-4x4x4--ones-I-exact-small.npz").write_bytes(b"not a pattern")
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
    name = "random-16x16x16--ones-I-exact-small.npz"
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
    t = store / "random-16x16x16--ones-I-exact-small.npz"
    raw = bytearray(t.read_bytes())
    raw[-100] ^= 0x40
    t.write_bytes(bytes(raw))
    # 2. missing
    (store / "walking-16x16x16--ones-I-exact-small.npz").unlink()
    # 3. a wrong expected C whose SHA-256 was updated to match (a store built on a faulty machine)
    w = store / "checkerboard-16x16x16--ones-I-exact-small.npz"
    with np.load(w, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["expected_c"] = _flip(arrays["expected_c"], 5, 3)
    w.write_bytes(golden._npz_bytes(arrays))
    _resign(store, w.name)
    # 4. an unlisted file
    shutil.copy(store / "extremes-16x16x16--ones-I-exact-small.npz", store / "stray.npz")
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
    f = store / "random-16x16x16--ones-I-exact-small.npz"
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
    (store / "random-8x8x8--ones-I-exact-small.npz").write_bytes(b"x")
    capsys.readouterr()
    assert _cli(["patterns", "verify", "--dir", str(store)]) == 1
    assert "random-8x8x8--ones-I-exact-small.npz" in capsys.readouterr().out


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


# ---------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["exact", "fma"])
def test_gpu_result_passes_the_golden_check(mode: str) -> None:
    """The CuPy kernels reproduce every golden pattern bit for bit (CuPy arrays accepted)."""
    import cupy

    for variant in (
        make_variant("ones", "I", mode, "small"),
        make_variant("xor_fletcher", "I", mode, "small"),
    ):
        for fam in FAMILIES:
            p = make_pattern(fam, (40, 24, 20), variant)
            res = run_variant(cupy.asarray(p.a), cupy.asarray(p.b), variant, backend="cupy")
            assert p.check(res.c, res.es), (fam, variant.name)
