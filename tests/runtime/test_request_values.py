"""Requests whose own values leave float32 (issue 11's rule: one client must not disturb the
daemon). A hidden activation that overflows float32 is found by every channel at the next
layer's finite check, and a 1oo1D product that overflows fails the per-request checksum test
for a reason that is the request's: both are answered `InvalidInputError` with no channel
faulted, and the daemon keeps serving. A channel that alone finds a request's values
non-finite disagrees with the others and is faulted, as any odd answer is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from safemon.channels.worker import ChannelWorker
from safemon.errors import InvalidInputError, NonFiniteOperandError
from safemon.models import Layer

from .helpers import make_config, operands, reference, same_bits, system, wait_for


def _healthy(client: Any) -> None:
    st = client.status()
    assert st["mode"] == "NORMAL" and not st["faults"], st
    assert all(c["state"] == "UP" for c in st["channels"]), st


@pytest.mark.parametrize("placement", ["stream", "inline"])
def test_a_model_whose_hidden_layer_overflows_is_invalid_input(tmp_path: Path,
                                                                placement: str) -> None:
    """Layer 0 of 3e38-valued weights overflows float32 on a finite x: every channel's
    layer 1 finds infinity in its input, the client gets InvalidInputError naming layer 1,
    no channel is faulted (before: every channel an error, SAFE), and the next request is
    released bit for bit."""
    cfg = make_config(tmp_path, "2oo3", placement=placement)
    big = np.full((12, 16), 3e38, dtype=np.float32)
    eye = np.eye(16, dtype=np.float32)
    x, w = operands(6)
    with system(cfg) as (_daemon, client):
        mid = client.register_model([Layer(client.register_weight(big)),
                                     Layer(client.register_weight(eye))])
        for _ in range(3):
            with pytest.raises(InvalidInputError, match=r"layer 1.*overflow float32"):
                client.run(mid, np.ones((2, 12), np.float32), timeout=2.0)
        _healthy(client)
        wid = client.register_weight(w)
        assert same_bits(client.matmul(x, wid, timeout=2.0), reference(x, w, cfg))
        _healthy(client)


def test_a_1oo1d_product_that_overflows_is_invalid_input(tmp_path: Path) -> None:
    """Under 1oo1D an overflowed C fails the per-request checksum test; the daemon finds
    that the kernels' reference computes the same non-finite C and answers
    InvalidInputError instead of faulting the one channel (before: SAFE)."""
    cfg = make_config(tmp_path, "1oo1D")
    big = np.full((12, 16), 3e38, dtype=np.float32)
    x, w = operands(6)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(big)
        for _ in range(3):
            with pytest.raises(InvalidInputError, match=r"leaves float32.*overflow"):
                client.matmul(np.ones((2, 12), np.float32), wid, timeout=2.0)
        _healthy(client)
        assert same_bits(client.matmul(x, client.register_weight(w), timeout=2.0),
                         reference(x, w, cfg))


def test_a_channel_that_alone_finds_the_values_non_finite_is_outvoted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """c1 answers every live product `input_invalid` while c0 and c2 compute: the vote
    releases their product, and c1 is faulted as the disagreeing minority."""
    real = ChannelWorker._run_matmul

    def run_matmul(self: Any, a: Any, weight: Any, job: Any, meta: dict[str, Any]) -> Any:
        if self.name == "c1" and job == "live":
            raise NonFiniteOperandError("a contains NaN or infinity", operand="a")
        return real(self, a, weight, job, meta)

    monkeypatch.setattr(ChannelWorker, "_run_matmul", run_matmul)
    cfg = make_config(tmp_path, "2oo3", placement="inline")
    x, w = operands(6)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        assert same_bits(client.matmul(x, wid, timeout=2.0), reference(x, w, cfg))
        assert wait_for(lambda: any(f["channel"] == "c1" and f["kind"] == "disagreement_minority"
                                    for f in client.status()["faults"]))


def test_a_non_finite_c_the_values_cannot_make_is_not_the_requests() -> None:
    """The 1oo1D rule: a non-finite C counts as the request's overflow only where the sums
    of |x·w| exceed float32's range; an infinity elsewhere (a fault) stays a channel error."""
    from safemon.runtime.core import _overflows

    x = np.ones((2, 3), dtype=np.float32)
    w = np.ones((3, 4), dtype=np.float32)
    c = x @ w
    assert _overflows(x, w, c) is None  # nothing non-finite
    c[1, 2] = np.inf
    assert _overflows(x, w, c) is None  # |x·w| sums to 3 there
    big = np.full((3, 4), 3e38, dtype=np.float32)
    c = np.full((2, 4), np.inf, dtype=np.float32)
    c[0, 0] = np.nan  # infinities of both signs met
    assert _overflows(x, big, c) is not None
    w_mixed = big.copy()
    w_mixed[:, 3] = 1.0
    c[:, 3] = np.inf  # column 3 cannot overflow: a fault
    assert _overflows(x, w_mixed, c) is None
