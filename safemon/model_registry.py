"""The daemon's registry of whole-model requests' models (`Client.register_model`).

A registered model keeps its two wire frames (sent with every request to the channels, so
a channel holds no model state and a restarted channel needs nothing re-sent) and its
layer shapes (for admission: the largest dimension and the channels' work budget, the sum
of the layers' item costs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon import admission
from safemon.config import Config
from safemon.errors import InvalidInputError
from safemon.models.layers import Layer, decode_model, model_id_of

__all__ = ["MAX_MODELS", "ModelRegistry", "RegisteredModel"]

#: The most models one daemon keeps (each is a few hundred bytes plus its biases).
MAX_MODELS = 1024


@dataclass(frozen=True)
class RegisteredModel:
    """One model: its layers, wire frames and (K_i, N_i) per layer."""

    model_id: str
    layers: tuple[Layer, ...]
    spec: npt.NDArray[np.uint8]
    biases: npt.NDArray[np.float32]
    dims: tuple[tuple[int, int], ...]

    @property
    def k_in(self) -> int:
        """Columns of the input x."""
        return self.dims[0][0]

    @property
    def n_out(self) -> int:
        """Columns of the output (the last layer's N)."""
        return self.dims[-1][1]

    @property
    def max_dim(self) -> int:
        """The largest K or N of any layer (for `limits.max_dim`)."""
        return max(max(k, n) for k, n in self.dims)

    def cost_s(self, config: Config, m: int) -> float:
        """Seconds a healthy channel may spend on the whole forward pass of M rows: the sum
        of the layers' `admission.item_cost_s`."""
        return sum(admission.item_cost_s(config, m, k, n) for k, n in self.dims)


    def budget_s(self, config: Config, m: int, queued_s: float) -> float:
        """The channels' work budget for the whole forward pass of M rows with `queued_s`
        seconds queued ahead: `admission.work_budget_s` of layer 0 plus the item costs of
        the other layers."""
        k0, n0 = self.dims[0]
        rest = sum(admission.item_cost_s(config, m, k, n) for k, n in self.dims[1:])
        return admission.work_budget_s(config, m, k0, n0, queued_s) + rest


class ModelRegistry:
    """Models by id. Not thread-safe (the daemon's loop owns it)."""

    def __init__(self) -> None:
        self._models: dict[str, RegisteredModel] = {}

    def __contains__(self, model_id: object) -> bool:
        return model_id in self._models

    def get(self, model_id: object) -> RegisteredModel | None:
        """The model `model_id`, or None when unknown."""
        return self._models.get(model_id) if isinstance(model_id, str) else None

    def register(self, frames: tuple[npt.NDArray[Any], ...],
                 weight_shapes: Mapping[str, tuple[int, ...]]) -> RegisteredModel:
        """Register the model carried by `frames` (spec, biases) over the registered
        weights; returns it (the same model again for the same layers).

        Raises:
            InvalidInputError: wrong frames, a malformed spec, unknown weights, shapes that
                do not chain (naming the layer), or `MAX_MODELS` models already held.
        """
        if len(frames) != 2:
            raise InvalidInputError(f"register_model carries 2 frames (spec, biases), got {len(frames)}")
        layers = decode_model(frames[0], frames[1], weight_shapes)
        mid = model_id_of(layers)
        known = self._models.get(mid)
        if known is not None:
            return known
        if len(self._models) >= MAX_MODELS:
            raise InvalidInputError(f"this daemon already holds {MAX_MODELS} models")
        dims = tuple((int(weight_shapes[ly.weight_id][0]), int(weight_shapes[ly.weight_id][1]))
                     for ly in layers)
        spec = np.array(frames[0], dtype=np.uint8, copy=True)
        biases = np.array(frames[1], dtype=np.float32, copy=True)
        model = RegisteredModel(mid, tuple(layers), spec, biases, dims)
        self._models[mid] = model
        return model
