"""Conv2d as one product over unfolded columns (`safemon.torch.conv`) equals F.conv2d."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from safemon.torch import conv as convmath  # noqa: E402

GEOMETRIES = [
    {"kernel_size": 3},
    {"kernel_size": 3, "padding": 1},
    {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)},
    {"kernel_size": 3, "dilation": 2, "padding": 2, "stride": 2},
    {"kernel_size": 1},
    {"kernel_size": 3, "padding": "same"},
    {"kernel_size": 5, "padding": "valid"},
]


@pytest.mark.parametrize("kwargs", GEOMETRIES)
def test_im2col_product_matches_conv2d(kwargs: dict[str, object]) -> None:
    """im2col · weight_matrix + bias, folded back with col2im, is F.conv2d (float64, so
    only the geometry is compared, not the rounding)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 5, **kwargs).double()  # type: ignore[arg-type]
    x = torch.randn(2, 3, 9, 8, dtype=torch.float64)
    g = convmath.geometry_of(conv)
    ho, wo = g.out_size(9, 8)
    y = convmath.im2col(x, g) @ convmath.weight_matrix(conv.weight.detach()) + conv.bias.detach()
    got = convmath.col2im(y, 2, ho, wo)
    want = F.conv2d(x, conv.weight, conv.bias, stride=conv.stride, padding=conv.padding,
                    dilation=conv.dilation)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("conv", "reason"), [
    (nn.Conv2d(4, 4, 3, groups=2), "groups=2"),
    (nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), "padding_mode"),
    (nn.Conv2d(3, 4, 2, padding="same"), "asymmetrically"),
])
def test_conv_support_names_what_cannot_unfold(conv: nn.Conv2d, reason: str) -> None:
    """Grouped, non-zero-padded and asymmetric 'same' convolutions are refused with why."""
    why = convmath.conv_support(conv)
    assert why is not None and reason in why


def test_conv_support_accepts_a_plain_conv() -> None:
    """A groups=1, zero-padded Conv2d is one product."""
    assert convmath.conv_support(nn.Conv2d(3, 4, 3, padding=1, stride=2)) is None
