"""run_protected against a fake daemon: what the report is built from, without sockets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from safemon.config import load_config
from safemon.demo.app import F32, LAYERS, N_CLASSES, N_HIDDEN, N_IN, DigitsMLP, batch_slices
from safemon.demo.faulty import FaultStep
from safemon.demo.runner import released_accuracy, run_protected
from safemon.errors import SafeStateError
from safemon.models import Layer, reference_forward


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(s, 0.001)


class _OneChannelDaemon:
    """1oo1D in miniature: the first injected fault is detected and latches SAFE; in SAFE
    every request is refused and nothing more is detected."""

    def __init__(self, clock: _Clock, variant: Any) -> None:
        self.clock, self.variant = clock, variant
        self.mode = "NORMAL"
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.weights: dict[str, F32] = {}
        self.layers: Sequence[Layer] = ()

    def register_weight(self, w: F32) -> str:
        wid = f"w{len(self.weights)}"
        self.weights[wid] = w
        return wid

    def register_model(self, layers: Sequence[Layer]) -> str:
        self.layers = layers
        return "m0"

    def run(self, model_id: str, x: F32, *, timeout: float = 2.0) -> F32:
        self.clock.sleep(0.01)  # a request takes time
        if self.mode == "SAFE":
            raise SafeStateError("SAFE")
        ws = [self.weights[layer.weight_id] for layer in self.layers]
        return np.asarray(reference_forward(ws, self.layers, x, variant=self.variant))

    @property
    def last_run_per_layer(self) -> bool:
        return False

    def inject(self, channel: str, fault: str) -> None:
        if self.mode == "SAFE":
            return  # the daemon no longer serves: the fault cannot show
        self.events.append((self.clock(), {"event": "fault", "channel": channel,
                                           "kind": "channel_error",
                                           "detected_at": self.clock() + 0.001}))
        self.mode = "SAFE"

    def clear_faults(self, channel: str | None = None) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {"mode": self.mode, "channels": [{"name": "ch0", "state": "UP",
                                                 "incarnation": 0}]}

    def poll(self) -> list[tuple[float, dict[str, Any]]]:
        out, self.events = self.events, []
        return out


def _model() -> DigitsMLP:
    rng = np.random.default_rng(0)
    shapes = {"fc1": (N_IN, N_HIDDEN), "fc2": (N_HIDDEN, N_CLASSES)}
    return DigitsMLP(
        weights={n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()},
        biases={n: rng.standard_normal(s[1]).astype(np.float32) for n, s in shapes.items()},
    )


def test_faults_record_the_mode_at_injection_and_refused_samples_are_not_wrong() -> None:
    """Under a fake 1oo1D daemon that latches SAFE at the first fault: the first fault is
    recorded as injected in NORMAL and detected, the second as injected in SAFE; the
    refused samples are -1 in the predictions and released_accuracy leaves them out."""
    clock = _Clock()
    variant = load_config(None).channels[0].variant  # type: ignore[index]
    daemon = _OneChannelDaemon(clock, variant)
    model = _model()
    x = np.random.default_rng(1).random((40, N_IN)).astype(np.float32)
    logits = reference_forward([model.weights[n] for n in LAYERS], model.layers(), x,
                               variant=variant)
    y = np.asarray(np.argmax(logits, axis=1), dtype=np.int64)  # all released ones right
    plan = (FaultStep("bitflip-c", 2, None), FaultStep("hang", 6, 8))
    res = run_protected(daemon, model, x, y, batch_slices(40, 4), plan, "ch0", variant,
                        daemon, grace_s=0.2, settle_s=0.2, clock=clock, sleep=clock.sleep)
    assert [f.mode_at_injection for f in res.faults] == ["NORMAL", "SAFE"]
    assert res.faults[0].detected and not res.faults[1].detected
    assert res.faults[1].injected_in_safe and not res.faults[1].undetected
    assert res.outputs_released == 2 and res.wrong_outputs_released == 0
    acc, refused = released_accuracy(res.predictions, y)
    assert (acc, refused) == (1.0, 32)


def test_released_accuracy_leaves_refused_samples_out() -> None:
    """-1 marks a refused sample: not counted as right or wrong; None when none released."""
    y = np.array([1, 2, 3, 4], dtype=np.int64)
    assert released_accuracy(np.array([1, 0, -1, -1], dtype=np.int64), y) == (0.5, 2)
    assert released_accuracy(np.full(4, -1, dtype=np.int64), y) == (None, 4)
