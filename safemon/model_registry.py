"""The daemon's registry of whole-model requests' models (`Client.register_model`).

A registered model keeps its two wire frames (sent with every request to the channels, so
a channel holds no model state and a restarted channel needs nothing re-sent) and its
layer shapes (for admission: the largest dimension and the channels' work budget, the sum
of the layers' item costs).

At most `MAX_MODELS` models of at most `limits.max_model_total_bytes` in all (their spec
and bias frames) are held: a new model evicts the least recently used ones that no request
in flight uses (`safemon.eviction`), and a model goes with any of its weights when that
weight is evicted (`drop_using`). A model's biases are held once: its layers' biases are
views of its bias frame (`decode_model`).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from safemon.config import LimitsConfig
from safemon.errors import InvalidInputError
from safemon.eviction import choose_evictions
from safemon.models.layers import ModelShape, Step, decode_steps, model_id_of, weight_ids

__all__ = ["MAX_MODELS", "ModelRegistry", "RegisteredModel"]

#: The most models one daemon keeps (each is a few hundred bytes plus its biases; the bytes
#: are bounded by `limits.max_model_total_bytes`).
MAX_MODELS = 1024


@dataclass(frozen=True)
class RegisteredModel:
    """One model: its steps, wire frames and shape (`ModelShape`). The frames are
    read-only, and the layers' biases are views of `biases`."""

    model_id: str
    layers: tuple[Step, ...]
    spec: npt.NDArray[np.uint8]
    biases: npt.NDArray[np.float32]
    shape: ModelShape

    @property
    def nbytes(self) -> int:
        """Bytes it counts against `limits.max_model_total_bytes`: its two frames."""
        return int(self.spec.nbytes) + int(self.biases.nbytes)

    @property
    def k_in(self) -> int:
        """Columns of the input x."""
        return self.shape.k_in

    @property
    def n_out(self) -> int:
        """Columns of the output (whose rows are the input's)."""
        return self.shape.n_out

    @property
    def max_dim(self) -> int:
        """The largest K or N of any product (for `limits.max_dim`)."""
        return self.shape.max_dim

    @functools.cached_property
    def weight_ids(self) -> tuple[str, ...]:
        """The weights its product layers use, each once, in layer order."""
        return tuple(dict.fromkeys(weight_ids(self.layers)))

    def cost_s(self, item_cost_s: Callable[[int, int, int], float], m: int) -> float:
        """Seconds a healthy channel may spend on the whole forward pass of M rows
        (`ModelShape.cost_s`, with `admission.item_cost_s` under the daemon's config)."""
        return self.shape.cost_s(item_cost_s, m)


class ModelRegistry:
    """Models by id, least recently used first. Not thread-safe (the daemon's loop owns it).

    Args:
        capacity: the most models held (`MAX_MODELS`).
        max_bytes: the most bytes of models held (`RegisteredModel.nbytes` summed;
            `limits.max_model_total_bytes`, its default when None).
    """

    def __init__(self, capacity: int = MAX_MODELS, max_bytes: int | None = None) -> None:
        self.capacity = capacity
        self.max_bytes = (LimitsConfig().max_model_total_bytes if max_bytes is None
                          else max_bytes)
        self._models: collections.OrderedDict[str, RegisteredModel] = collections.OrderedDict()

    def __contains__(self, model_id: object) -> bool:
        return model_id in self._models

    def __len__(self) -> int:
        return len(self._models)

    @property
    def nbytes(self) -> int:
        """Bytes of the models held (`RegisteredModel.nbytes` summed)."""
        return sum(m.nbytes for m in self._models.values())

    def get(self, model_id: object) -> RegisteredModel | None:
        """The model `model_id`, or None when unknown."""
        return self._models.get(model_id) if isinstance(model_id, str) else None

    def touch(self, model_id: str) -> None:
        """`model_id` was just used: it is evicted last."""
        if model_id in self._models:
            self._models.move_to_end(model_id)

    def drop_using(self, weight_id: str) -> list[str]:
        """Forget every model that has a layer on weight `weight_id` (being evicted);
        returns their ids."""
        gone = [mid for mid, m in self._models.items() if weight_id in m.weight_ids]
        for mid in gone:
            del self._models[mid]
        return gone

    def register(self, frames: tuple[npt.NDArray[Any], ...],
                 weight_shapes: Mapping[str, tuple[int, ...]],
                 in_use: frozenset[str] = frozenset()) -> tuple[RegisteredModel, list[str]]:
        """Register the model carried by `frames` (spec, biases) over the registered
        weights; returns it (the same model again for the same layers, now the most
        recently used) and the ids of the models evicted to make room for it (the least
        recently used ones not in `in_use`, the fewest that bring the registry within
        `capacity` models and `max_bytes` bytes with the new one). The model keeps one
        read-only copy of each frame; its layers' biases are views of the copy.

        Raises:
            InvalidInputError: wrong frames, frames of more than `max_bytes` bytes together
                (naming `limits.max_model_total_bytes`), a malformed spec, unknown weights,
                shapes that do not chain (naming the layer), or no room that evicting the
                models requests in flight do not use could make.
        """
        if len(frames) != 2:
            raise InvalidInputError(f"register_model carries 2 frames (spec, biases), got {len(frames)}")
        new_bytes = int(frames[0].nbytes) + int(frames[1].nbytes)
        if new_bytes > self.max_bytes:
            raise InvalidInputError(
                f"the model's frames hold {new_bytes} bytes (spec and biases), over "
                f"limits.max_model_total_bytes ({self.max_bytes})")
        # Decoded from the copies the model keeps, so that the layers' biases view them.
        spec, biases = _read_only_copy(frames[0]), _read_only_copy(frames[1])
        layers, shape = decode_steps(spec, biases, weight_shapes)
        mid = model_id_of(layers)
        known = self._models.get(mid)
        if known is not None:
            self._models.move_to_end(mid)
            return known, []
        evict = choose_evictions(self._models, {m: x.nbytes for m, x in self._models.items()},
                                 in_use, new_bytes=new_bytes, max_count=self.capacity,
                                 max_bytes=self.max_bytes)
        if evict is None:
            raise InvalidInputError(
                f"this daemon holds {len(self._models)} models of {self.nbytes} bytes (at most "
                f"{self.capacity} models, limits.max_model_total_bytes = {self.max_bytes}), "
                f"and requests in flight use every one of them that would have to go to make "
                f"room for this one's {new_bytes} bytes: retry later")
        for old in evict:
            del self._models[old]
        model = RegisteredModel(mid, tuple(layers), spec, biases, shape)
        self._models[mid] = model
        return model, evict


def _read_only_copy(frame: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A C-contiguous, read-only copy of `frame` (same dtype and shape; `decode_model`
    checks them): the registry owns it, and nobody writes to a frame it sends."""
    copy = np.array(frame, order="C", copy=True)
    copy.flags.writeable = False
    return copy
