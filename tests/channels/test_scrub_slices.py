"""A channel's scrub command patrols its resident weights for a time slice and resumes
where the last one stopped (`ChannelWorker._scrub`): with a clock that runs out after
every step, successive scrubs still reach every word of every weight, in order, and a
flipped bit deep in the last weight is corrected by a scrub, not by a use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq

from safemon.channels import worker as worker_module
from safemon.channels.worker import ChannelWorker
from safemon.ecc import ProtectedArray
from safemon.weight_id import weight_id_of

from ..runtime.helpers import make_config


class _Clock:
    """Each reading is one second after the last: every time slice ends after one step."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[ChannelWorker]:
    ctx = zmq.Context()
    try:
        yield ChannelWorker(ctx, make_config(tmp_path, "2oo3"), "c0", incarnation=0, epoch=1,
                            link="", clock=_Clock())
    finally:
        ctx.term()


def test_scrubs_cut_into_slices_patrol_every_word_and_correct_a_deep_flip(
        worker: ChannelWorker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "SCRUB_CHUNK_WORDS", 64)  # 64 words a step
    rng = np.random.default_rng(4)
    ids = []
    for shape in ((16, 16), (32, 24)):  # 256 and 768 words: 4 and 12 steps
        w = rng.standard_normal(shape).astype(np.float32)
        ids.append(weight_id_of(w))
        assert worker._store_weight(ids[-1], w)
    last = worker._weights[ids[1]]
    assert isinstance(last, ProtectedArray)
    last.verified().reshape(-1).view(np.uint8)[4 * 700] ^= np.uint8(1 << 5)  # word 700
    corrected = []
    for _ in range(16):  # one step each: 4 + 12 steps patrol both once
        corrected.append(worker._scrub()[0])
    assert sum(corrected) == 1 and corrected.index(1) == 4 + 700 // 64
    assert last.corrected_total == 1
    assert worker._scrub_at == ids[0]  # the patrol starts over with the first weight
