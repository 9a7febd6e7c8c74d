"""Arguments a client can get wrong, refused by `Client` with `InvalidInputError` before
anything is sent (found by a review of bad input): a timeout that is not a finite number of
seconds up to a day (a bool, inf, 1e300), an id that is not the string its registration
returned, a masked array or an np.matrix (whose mask or semantics would be lost), and a
message over the transport's limits (which the daemon would drop unanswered)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from safemon.errors import InvalidInputError
from safemon.models import Layer

from .helpers import make_config, operands, reference, same_bits, system


def test_bad_arguments_are_refused_before_anything_is_sent(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, "2oo3")
    x, w = operands(3)
    with system(cfg) as (daemon, client):
        wid = client.register_weight(w)
        mid = client.register_model([Layer(wid)])

        def released() -> float:
            v = daemon.registry.get_sample_value("safemon_requests_total",
                                                 {"outcome": "released"})
            return v or 0.0

        before = released()
        for timeout in (True, float("inf"), float("nan"), 1e300, 0, -1, "1"):
            with pytest.raises(InvalidInputError, match="timeout must be"):
                client.matmul(x, wid, timeout=timeout)  # type: ignore[arg-type]
            with pytest.raises(InvalidInputError, match="timeout must be"):
                client.run(mid, x, timeout=timeout)  # type: ignore[arg-type]
        for bad_id in (None, 5, [wid]):
            with pytest.raises(InvalidInputError, match="weight_id must be the string"):
                client.matmul(x, bad_id)  # type: ignore[arg-type]
            with pytest.raises(InvalidInputError, match="model_id must be the string"):
                client.run(bad_id, x)  # type: ignore[arg-type]
        masked = np.ma.masked_array(x, mask=np.zeros_like(x, dtype=bool))
        with pytest.raises(InvalidInputError, match=r"MaskedArray.*mask"):
            client.matmul(masked, wid)
        with pytest.warns(PendingDeprecationWarning):
            as_matrix = np.asmatrix(x)
        with pytest.raises(InvalidInputError, match="matrix"):
            client.matmul(as_matrix, wid)
        assert released() == before
        assert same_bits(client.matmul(x, wid, timeout=2.0), reference(x, w, cfg))
        st = client.status()
        assert st["mode"] == "NORMAL" and not st["faults"], st


def test_a_message_over_the_transports_limits_is_refused_by_the_client(tmp_path: Path) -> None:
    """Over ipc:// a frame bigger than the daemon's client sockets admit (their MAXMSGSIZE,
    `admission.client_limits`: 64 MiB under the default limits) is dropped by libzmq
    unanswered; the client refuses it itself, with InvalidInputError naming the sizes,
    instead of a DaemonUnreachableError after its control timeout."""
    cfg = make_config(tmp_path, "2oo3", transport="ipc")
    with system(cfg) as (_daemon, client):
        client.control_timeout_s = 3.0
        too_big = client._send_limits.max_frame_bytes // 4 + 1
        with pytest.raises(InvalidInputError, match=r"frame 0 is \d+ bytes, at most"):
            client.register_weight(np.ones((too_big, 1), dtype=np.float32))


def test_register_model_sends_this_clients_weights_again_to_a_daemon_that_lost_them(
        tmp_path: Path) -> None:
    """A daemon that does not hold a weight this client registered (it restarted) answers
    register_model with UnknownWeightError; the client registers its own copy again (same
    content, same id) and the model with it. Here the daemon never got the weight: the
    client holds it as it would after a daemon restart."""
    from safemon.errors import UnknownWeightError
    from safemon.models import reference_forward
    from safemon.weight_id import weight_id_of

    cfg = make_config(tmp_path, "2oo3")
    x, w = operands(4)
    with system(cfg) as (_daemon, client):
        wid = weight_id_of(w)
        client._weights[wid] = w.copy()  # what a client keeps across a daemon restart
        layers = [Layer(wid, None, "relu")]
        mid = client.register_model(layers)
        assert same_bits(client.run(mid, x, timeout=2.0), reference_forward([w], layers, x))
        other = Layer(weight_id_of(w * 2))  # a weight nobody registered: still refused
        with pytest.raises(UnknownWeightError, match="not registered"):
            client.register_model([other])


def test_a_large_weight_is_given_the_time_its_channels_take_to_store_it(tmp_path: Path) -> None:
    """Three inline channels store a 16 MiB weight one after another (ECC-encoded on the
    NumPy backend), which takes far longer than this client's 50 ms control timeout: the
    registration waits for it instead of raising DaemonUnreachableError (a 64 MiB weight
    timed out so against three inline channels on an H100, at the default 2 s)."""
    cfg = make_config(tmp_path, "2oo3", placement="inline", transport="ipc")
    w = np.random.default_rng(6).standard_normal((2048, 2048)).astype(np.float32)
    with system(cfg) as (daemon, client):
        client.control_timeout_s = 0.05
        wid = client.register_weight(w)
        assert daemon.core is not None and wid in daemon.core.weights
        assert daemon.status()["mode"] == "NORMAL"


def test_a_request_no_daemon_answers_is_a_daemon_error_and_a_timeout(tmp_path: Path) -> None:
    """Found by a user trial (2026-12-07): with no daemon running, a control call raised
    DaemonUnreachableError but `matmul` a VoteTimeoutError "within 0.9998484269999608 s",
    so code catching the first missed the second. Now it is both, with a readable time."""
    from safemon import Client, DaemonSilentError, DaemonUnreachableError, VoteTimeoutError

    cfg = make_config(tmp_path, "2oo3", transport="ipc")  # nothing listens on its ingress
    x, _w = operands(3)
    with Client(cfg) as client, pytest.raises(DaemonSilentError) as caught:
        client.matmul(x, "0" * 24, timeout=0.3)
    assert isinstance(caught.value, DaemonUnreachableError)
    assert isinstance(caught.value, VoteTimeoutError)
    assert re.search(r"within 0\.\d{1,3} s", str(caught.value)), caught.value
