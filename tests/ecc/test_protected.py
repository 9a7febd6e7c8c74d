"""ProtectedArray on the NumPy backend (host memory as the "device"): transfers, checks, scrubs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from safemon.ecc import ProtectedArray
from safemon.errors import InvalidInputError, UncorrectableError


def _weights(shape: tuple[int, ...] = (33, 7)) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _flip(arr: Any, byte: int, bit: int) -> None:
    arr.reshape(-1).view(np.uint8)[byte] ^= np.uint8(1 << bit)


def test_from_host_numpy_round_trip_and_attributes() -> None:
    w = _weights()
    pa = ProtectedArray.from_host(w, name="w0", backend="numpy")
    assert (pa.name, pa.shape, pa.dtype, pa.nbytes) == ("w0", w.shape, np.float32, w.nbytes)
    assert not pa.on_device and pa.n_words == w.size
    assert np.array_equal(pa.verified(), w)
    out = pa.to_host()
    assert np.array_equal(out, w) and out is not pa.verified()
    assert (pa.corrected_total, pa.uncorrectable_total) == (0, 0)


def test_from_host_copies_its_input() -> None:
    w = _weights()
    pa = ProtectedArray.from_host(w, name="w", backend="numpy")
    w[0, 0] = 42.0
    assert pa.verified()[0, 0] != 42.0


def test_transfer_flip_is_corrected_and_counted() -> None:
    """A single flip between host encode and device verify is corrected, and counted."""
    w = _weights()
    seen: list[tuple[str, int, int]] = []
    pa = ProtectedArray.from_host(
        w, name="w", backend="numpy",
        after_upload=lambda d, c: _flip(d, 13, 5),
        on_errors=lambda *a: seen.append(a),
    )
    assert np.array_equal(pa.verified(), w)
    assert pa.corrected_total == 1 and seen == [("w", 1, 0)]


def test_transfer_double_flip_raises_naming_buffer_and_word() -> None:
    w = _weights()

    def hit(d: Any, c: Any) -> None:
        _flip(d, 40, 0)  # word 10 (32-bit words)
        _flip(d, 41, 3)

    with pytest.raises(UncorrectableError) as ei:
        ProtectedArray.from_host(w, name="layer1.weight", backend="numpy", after_upload=hit)
    assert ei.value.buffer == "layer1.weight" and ei.value.words == (10,)
    assert "layer1.weight" in str(ei.value)


@pytest.mark.parametrize("word_bits", [32, 64])
def test_verified_corrects_in_place_and_raises_on_uncorrectable(word_bits: int) -> None:
    w = _weights((5, 11))  # 220 bytes: not a multiple of 8, so the 64-bit code has a tail
    pa = ProtectedArray.from_host(w, name="w", word_bits=word_bits, backend="numpy")
    store = pa.verified()
    _flip(store, 3, 1)
    assert np.array_equal(pa.verified(), w)
    assert pa.corrected_total == 1
    wb = word_bits // 8
    _flip(store, 2 * wb, 0)
    _flip(store, 2 * wb + 1, 0)
    _flip(store, 217, 2)  # tail word, single: still corrected
    with pytest.raises(UncorrectableError) as ei:
        pa.verified()
    assert ei.value.words == (2,)
    with pytest.raises(UncorrectableError):
        pa.to_host()
    assert pa.uncorrectable_total == 1  # counted once, however often it is seen
    assert pa.known_bad_words == (2,)


def test_to_host_verifies_download_without_touching_storage() -> None:
    w = _weights()
    pa = ProtectedArray.from_host(w, name="w", backend="numpy")
    _flip(pa.verified(), 7, 7)
    out = pa.to_host()
    assert np.array_equal(out, w)
    assert not np.array_equal(pa._data, w)  # storage is fixed by the next check, not here
    assert pa.scrub().corrected == 1 and np.array_equal(pa._data, w)


def test_constructor_encodes_device_side_data_and_copies() -> None:
    a = np.arange(10, dtype=np.int64)
    pa = ProtectedArray(a, name="a", word_bits=64)
    a[0] = 99
    assert pa.verified()[0] == 0 and pa.word_bits == 64


def test_update_rewrites_and_clears_known_bad() -> None:
    w = _weights()
    pa = ProtectedArray.from_host(w, name="w", backend="numpy")
    store = pa.verified()
    _flip(store, 0, 0)
    _flip(store, 0, 1)
    assert not pa.scrub().ok
    pa.update(w * 2)
    assert np.array_equal(pa.verified(), w * 2) and pa.known_bad_words == ()
    with pytest.raises(InvalidInputError, match="shape"):
        pa.update(w[:3])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"array": [1.0, 2.0], "name": "x"}, "NumPy array"),
        ({"array": np.zeros(3), "name": ""}, "name"),
        ({"array": np.zeros(3), "name": "x", "word_bits": 8}, "32 or 64"),
        ({"array": np.zeros(3), "name": "x", "backend": "tpu"}, "backend"),
    ],
)
def test_from_host_rejects_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        ProtectedArray.from_host(**kwargs)


def test_auto_backend_without_gpu_uses_host_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import safemon.kernels.compiler as compiler  # Backend.resolve asks it

    monkeypatch.setattr(compiler, "cuda_available", lambda: False)
    assert not ProtectedArray.from_host(_weights(), name="w").on_device


def test_scrub_corrects_single_errors_and_counts_cumulatively() -> None:
    """A patrol corrects single errors, reports a double error once, and the per-buffer
    totals grow monotonically (what `safemon_ecc_*_total{buffer}` are fed from)."""
    a = ProtectedArray.from_host(_weights(), name="a", backend="numpy")
    b = ProtectedArray.from_host(_weights((9,)), name="b", word_bits=64, backend="numpy")
    sa, sb = a.verified(), b.verified()
    _flip(sa, 0, 0)
    _flip(sa, 100, 4)
    _flip(sb, 8, 0)  # word 1 of b: double error
    _flip(sb, 9, 0)
    first = [a.scrub(), b.scrub()]
    assert [r.buffer for r in first] == ["a", "b"]
    assert first[0].corrected == 2 and first[0].ok
    assert first[1].uncorrectable_words.tolist() == [1] and first[1].new_uncorrectable == 1
    second = [a.scrub(), b.scrub()]
    assert second[0].corrected == 0 and second[1].new_uncorrectable == 0
    assert (a.corrected_total, a.uncorrectable_total) == (2, 0)
    assert (b.corrected_total, b.uncorrectable_total) == (0, 1)


@pytest.mark.parametrize("word_bits", [32, 64])
def test_a_patrol_in_parts_covers_every_word_and_names_words_of_the_whole_buffer(
        word_bits: int) -> None:
    """`scrub_part` walks the buffer in steps (a multiple of 4 words), corrects what it
    finds in place, reports uncorrectable words by their index in the whole buffer, says
    when it reached the end, and starts again at word 0."""
    w = _weights((5, 11))  # 220 bytes: a tail word in the 64-bit code
    pa = ProtectedArray.from_host(w, name="w", word_bits=word_bits, backend="numpy")
    store = pa.verified()
    wb = word_bits // 8
    total = -(-w.nbytes // wb)
    _flip(store, 3, 1)                      # word 0: corrected by the first part
    _flip(store, w.nbytes - 1, 6)           # the last word: corrected by the last part
    _flip(store, 9 * wb, 0)                 # word 9: two flips, uncorrectable
    _flip(store, 9 * wb + 1, 2)
    seen, done, parts = 0, False, 0
    bad: list[int] = []
    while not done:
        res, done = pa.scrub_part(5)        # rounded up to 8 words a part
        seen += res.n_words
        bad += res.uncorrectable_words.tolist()
        parts += 1
    assert seen == total and parts == -(-total // 8)
    assert bad == [9] and pa.uncorrectable_total == 1 and pa.corrected_total == 2
    flat = np.array(store).reshape(-1).view(np.uint8)
    good = w.reshape(-1).view(np.uint8)
    assert np.array_equal(np.delete(flat, np.s_[9 * wb:10 * wb]),
                          np.delete(good, np.s_[9 * wb:10 * wb]))
    res, done = pa.scrub_part(8)            # word 0 again: nothing new
    assert res.n_words == 8 and res.uncorrectable_words.size == 0 and not done
    assert pa.uncorrectable_total == 1      # word 9 is known-bad, not counted twice
    with pytest.raises(InvalidInputError, match="max_words"):
        pa.scrub_part(0)
