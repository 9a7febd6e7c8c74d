"""A failed in-kernel check (issue 15) is a channel fault: the request is not released.

Real daemon, real channels over inproc ZeroMQ, NumPy backend: channels running an ABFT
variant refuse a product whose C overflowed (ABFT never vouches for a non-finite C), while
channels without ABFT would agree on the infinite C bit for bit and release it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from safemon.errors import SafemonError

from .helpers import make_config, operands, reference, same_bits, system


def _channels(abft: bool | str) -> list[dict[str, object]]:
    return [{"name": f"c{i}", "placement": "stream", "variant": {"abft": abft}} for i in range(3)]


@pytest.mark.parametrize("abft", [True, "rows"])
def test_abft_channels_release_clean_products_and_refuse_overflowed_ones(
        tmp_path: Path, abft: bool | str) -> None:
    cfg = make_config(tmp_path, "2oo3", extra={"channels": _channels(abft)})
    x, w = operands(3)
    huge = np.full_like(x, 3e38)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        assert same_bits(client.matmul(x, wid, timeout=2.0), reference(x, w, cfg))
        with pytest.raises(SafemonError, match="kernel_check_failed: in-kernel abft check"):
            client.matmul(huge, wid, timeout=2.0)
        released = daemon.registry.get_sample_value("safemon_requests_total",
                                                    {"outcome": "released"})
        assert released == 1


def test_channels_without_abft_release_the_overflowed_product(tmp_path: Path) -> None:
    """The contrast that makes the test above meaningful."""
    cfg = make_config(tmp_path, "2oo3", extra={"channels": _channels(False)})
    x, w = operands(3)
    with system(cfg) as (_daemon, client):
        wid = client.register_weight(w)
        c = client.matmul(np.full_like(x, 3e38), wid, timeout=2.0)
        assert not np.isfinite(c).all()
