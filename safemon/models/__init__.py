"""Whole-model requests: layers (`Layer`, `Activation`) and the other steps (`LayerNorm`,
`Attention`, `SaveResidual`, `AddResidual`, `Reshape`), their validation and wire form,
and the forward pass (`reference_forward` is the bit-exact NumPy reference of what the
channels compute; `run_model` is what a channel runs)."""

from __future__ import annotations

from safemon.models.activations import Activation, epilogue, gelu_erf_f32, gelu_f32, relu_f32
from safemon.models.forward import (
    ModelResult,
    first_diverging_layer,
    reference_forward,
    run_model,
    run_model_steps,
)
from safemon.models.layers import (
    MAX_LAYERS,
    Layer,
    ModelShape,
    Step,
    decode_model,
    encode_model,
    model_id_of,
    validate_layers,
)
from safemon.models.ops import AddResidual, Attention, LayerNorm, Reshape, SaveResidual

__all__ = [
    "MAX_LAYERS",
    "Activation",
    "AddResidual",
    "Attention",
    "Layer",
    "LayerNorm",
    "ModelResult",
    "ModelShape",
    "Reshape",
    "SaveResidual",
    "Step",
    "decode_model",
    "encode_model",
    "epilogue",
    "first_diverging_layer",
    "gelu_erf_f32",
    "gelu_f32",
    "model_id_of",
    "reference_forward",
    "relu_f32",
    "run_model",
    "run_model_steps",
    "validate_layers",
]
