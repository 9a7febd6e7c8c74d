"""The sans-IO voter deciding on channel-computed digests (digest voting): the digest
frames of `run_model` are what the daemon hands the voter, and a channel whose output
or per-layer digests differ is the minority."""

from __future__ import annotations

import numpy as np

from safemon.config import VariantConfig
from safemon.models import Layer, first_diverging_layer, run_model
from safemon.patterns import voter as vot
from safemon.states import Policy


def _frames() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    ws = {"a": rng.standard_normal((6, 8)).astype(np.float32),
          "b": rng.standard_normal((8, 3)).astype(np.float32)}
    layers = [Layer("a", rng.standard_normal(8).astype(np.float32), "gelu"), Layer("b")]
    x = rng.standard_normal((4, 6)).astype(np.float32)
    good = run_model(layers, ws, x, VariantConfig(), "numpy").digest_frame()

    def flip(i: int, c: np.ndarray, _es: np.ndarray) -> None:
        if i == 0:
            c.view(np.uint32)[0, 0] ^= 1 << 3
    bad = run_model(layers, ws, x, VariantConfig(), "numpy", flip).digest_frame()
    return good, bad


def _result(ch: str, frame: np.ndarray) -> vot.ChannelResult:
    return vot.ChannelResult(1, ch, 0.1, True, frame[:1].tobytes(), frame[1:].tobytes(), "v")


def test_2oo3_releases_the_agreeing_digests_and_names_the_minority() -> None:
    """Two equal digest frames release at once; the third, differing from layer 0 on, is
    the minority at close, and first_diverging_layer names layer 0."""
    good, bad = _frames()
    assert first_diverging_layer(good.tolist(), bad.tolist()) == 0
    v = vot.Voter()
    v.handle(vot.Submit(1, 0.0, 1.0, ("c0", "c1", "c2"), Policy.TWO_OO_THREE))
    assert v.handle(_result("c0", good)) == []
    out = v.handle(_result("c1", good))
    assert any(isinstance(d, vot.Release) for d in out)
    out = v.handle(_result("c2", bad))
    dis = [d for d in out if isinstance(d, vot.Disagreement)]
    assert dis and dis[0].minority == ("c2",)


def test_2oo2_fails_when_only_a_layer_digest_differs() -> None:
    """Equal outputs but a differing per-layer ES digest is still a disagreement (the ES
    digests are compared for one variant), so nothing is released."""
    good, _bad = _frames()
    other = good.copy()
    other[1] ^= np.uint64(1)  # layer 0's ES digest
    v = vot.Voter()
    v.handle(vot.Submit(1, 0.0, 1.0, ("c0", "c1"), Policy.TWO_OO_TWO))
    v.handle(_result("c0", good))
    out = v.handle(_result("c1", other))
    assert any(isinstance(d, vot.Fail) and d.error == "disagreement" for d in out)
    assert not any(isinstance(d, vot.Release) for d in out)
