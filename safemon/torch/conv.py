"""Conv2d as one matrix product (im2col): the geometry, with no safemon in it.

A Conv2d with weight (O, C, kh, kw), stride s, padding p and dilation d maps an input
(N, C, H, W) to (N, O, Ho, Wo), Ho = ⌊(H + 2·p_h − d_h·(kh − 1) − 1) / s_h⌋ + 1 (same for W).
`torch.nn.functional.unfold` gathers every receptive field into a column, so

    cols = im2col(x)                       # (N·Ho·Wo, C·kh·kw), rows ordered (n, i, j)
    y    = cols · Wmat + bias              # Wmat = weight.reshape(O, C·kh·kw).T: (C·kh·kw, O)
    out  = col2im(y, N, Ho, Wo)            # (N, O, Ho, Wo)

Unfold and the reshapes only move values (no arithmetic), so the one product is all the
floating-point work; that is the part safemon protects.

Only `groups == 1` and `padding_mode == "zeros"` are expressible this way (`conv_support`
says why another layer is left to PyTorch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ConvGeometry", "col2im", "conv_support", "geometry_of", "im2col", "weight_matrix"]


@dataclass(frozen=True)
class ConvGeometry:
    """The unfold parameters of a Conv2d (pairs are (height, width))."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]

    def out_size(self, h: int, w: int) -> tuple[int, int]:
        """(Ho, Wo) for an (H, W) input."""
        sizes = []
        for size, k, s, p, d in zip((h, w), self.kernel, self.stride, self.padding,
                                    self.dilation, strict=True):
            sizes.append((size + 2 * p - d * (k - 1) - 1) // s + 1)
        return sizes[0], sizes[1]


def _pair(v: int | tuple[int, ...]) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    return int(v[0]), int(v[1])


def _padding(conv: nn.Conv2d) -> tuple[int, int] | None:
    """Symmetric padding as a pair, or None where it is not symmetric ('same' with an
    even receptive field pads one side more)."""
    if conv.padding == "valid":
        return 0, 0
    if conv.padding == "same":
        pads = []
        for k, d in zip(_pair(conv.kernel_size), _pair(conv.dilation), strict=True):
            total = d * (k - 1)
            if total % 2:
                return None
            pads.append(total // 2)
        return pads[0], pads[1]
    assert not isinstance(conv.padding, str)
    return _pair(conv.padding)


def conv_support(conv: nn.Conv2d) -> str | None:
    """None when `conv` is one im2col product; otherwise why it is left to PyTorch."""
    if type(conv) is not nn.Conv2d:
        return f"{type(conv).__name__} is a subclass of Conv2d whose forward may differ"
    if conv.groups != 1:
        return f"groups={conv.groups} (grouped/depthwise convolutions are not one product)"
    if conv.padding_mode != "zeros":
        return f"padding_mode={conv.padding_mode!r} (only zero padding unfolds)"
    if _padding(conv) is None:
        return "padding='same' with an even receptive field pads asymmetrically"
    return None


def geometry_of(conv: nn.Conv2d) -> ConvGeometry:
    """The unfold parameters of a supported `conv` (`conv_support(conv) is None`)."""
    padding = _padding(conv)
    assert padding is not None, "geometry_of needs a supported Conv2d"
    return ConvGeometry(_pair(conv.kernel_size), _pair(conv.stride), padding,
                        _pair(conv.dilation))


def weight_matrix(weight: torch.Tensor) -> torch.Tensor:
    """(O, C, kh, kw) → the (C·kh·kw, O) contiguous matrix the columns multiply."""
    return weight.reshape(weight.shape[0], -1).t().contiguous()


def im2col(x: torch.Tensor, g: ConvGeometry) -> torch.Tensor:
    """(N, C, H, W) → the (N·Ho·Wo, C·kh·kw) contiguous matrix of receptive fields."""
    cols = F.unfold(x, g.kernel, dilation=g.dilation, padding=g.padding, stride=g.stride)
    return cols.transpose(1, 2).reshape(-1, cols.shape[1]).contiguous()


def col2im(y: torch.Tensor, n: int, ho: int, wo: int) -> torch.Tensor:
    """(N·Ho·Wo, O) → (N, O, Ho, Wo) (contiguous; N may be 0)."""
    o = int(y.shape[1])
    return y.reshape(n, ho * wo, o).transpose(1, 2).reshape(n, o, ho, wo).contiguous()
