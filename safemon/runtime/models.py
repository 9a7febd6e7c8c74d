"""Whole-model requests in the runtime core (issue 16; docs/PROTOCOL.md section 10).

`ModelRequests` is the part of `RuntimeCore` that registers models (`command=
"register_model"` on ingress), votes on the digest frames the channels send for
`job="model"` results, names the first diverging layer on a disagreement, and checks that
the output bytes about to be released are the ones the vote judged. It only emits effects
through `Roles`; the model definitions live in `safemon.model_registry`.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from safemon.errors import InvalidInputError, UnknownWeightError
from safemon.model_registry import ModelRegistry
from safemon.models.forward import first_diverging_layer
from safemon.patterns import voter as vot
from safemon.runtime.roles import Roles
from safemon.runtime.support import MAX_QUOTE, Live
from safemon.transport import messages as msgs
from safemon.transport.wire import Kind, Message

__all__ = ["MODEL_DIGESTS_KEPT", "ModelRequests"]

#: Whole-model requests whose per-layer digests are kept to name a diverging layer.
MODEL_DIGESTS_KEPT = 1024


class ModelRequests(Roles):
    """Model registration, the digest vote of model results, the first diverging layer."""

    weights: dict[str, npt.NDArray[np.float32]]
    _queued: dict[str, dict[int, tuple[float, float]]]

    def _init_models(self) -> None:
        self.models = ModelRegistry(max_bytes=self.config.limits.max_model_total_bytes)
        #: seq -> {channel: digest frame} of the newest MODEL_DIGESTS_KEPT model requests
        self._model_digests: collections.OrderedDict[int, dict[str, tuple[int, ...]]] = (
            collections.OrderedDict())

    def _register_model(self, identity: bytes, msg: Message) -> None:
        """Frames [spec, biases]; answered with the model id or a typed InvalidInputError
        naming the layer at fault."""
        shapes = {wid: tuple(w.shape) for wid, w in self.weights.items()}
        try:
            model, evicted = self.models.register(tuple(msg.arrays), shapes,
                                                  self._models_in_flight())
        except InvalidInputError as exc:
            text = str(exc)
            if len(text) > 4 * MAX_QUOTE:
                text = text[: 4 * MAX_QUOTE - 3] + "..."
            kind = "UnknownWeightError" if isinstance(exc, UnknownWeightError) else "InvalidInputError"
            self._error_to("ingress", identity, msg.seq, kind, text)
            return
        for mid in evicted:
            self._model_evicted(mid, "the model budget (model_registry.MAX_MODELS, "
                                "limits.max_model_total_bytes) is full")
        self._log("info", "model_registered", model_id=model.model_id, layers=len(model.layers))
        self._reply("ingress", identity, Kind.REPLY, msg.seq,
                    msgs.ControlReply(ok=True, outcome=model.model_id).to_meta())

    def _models_in_flight(self) -> frozenset[str]:
        """Ids of the models that requests in flight use (never evicted)."""
        return frozenset(live.model.model_id for live in self._live.values()
                         if live.model is not None)

    def _model_evicted(self, model_id: str, why: str) -> None:
        """Count and log model `model_id`, evicted (`safemon.eviction`): its client
        registers it again on `UnknownModelError`."""
        self.metrics.count_eviction("model")
        self._log("info", "model_evicted", model_id=model_id, reason=why)

    def _on_model_result(self, name: str, msg: Message, now: float) -> None:
        """[output, digests]: the vote compares the channel-computed digests (output; per
        layer ES and output), never the ES arrays, which stay on the channel. A malformed
        digest frame is a channel error."""
        self._queued[name].pop(msg.seq, None)
        live = self._live.get(msg.seq)
        ok = msg.meta.get("ok") is True and len(msg.arrays) == 2
        digests = msg.arrays[1] if ok else None
        if (digests is not None and live is not None and live.model is not None
                and (digests.dtype != np.uint64
                     or digests.shape != (1 + 2 * len(live.model.layers),))):
            digests = None
        ks = msg.meta.get("kernel_seconds")
        if digests is None:
            error = msg.meta.get("error")
            text = error if isinstance(error, str) and error else "model result without output and digests"
            self._voter(vot.ChannelResult(msg.seq, name, now, False, b"", b"", "", text))
            return
        if isinstance(ks, float) and ks >= 0:
            self.metrics.observe_kernel(name, ks)
        if live is not None:
            live.results[name] = msg.arrays[0]
            if isinstance(ks, float) and ks >= 0:
                live.kernel_seconds[name] = ks
        self._keep_model_digests(msg.seq, name, tuple(int(d) for d in digests))
        out = msg.arrays[0]
        c_digest = f"{out.dtype.str}{out.shape}".encode() + digests[:1].tobytes()
        self._voter(vot.ChannelResult(msg.seq, name, now, True, c_digest, digests[1:].tobytes(),
                                      str(msg.meta.get("variant", ""))))

    def _keep_model_digests(self, seq: int, name: str, frame: tuple[int, ...]) -> None:
        """Keep `name`'s digest frame of model request `seq` (the newest
        `MODEL_DIGESTS_KEPT` requests' frames are kept) to name a diverging layer."""
        self._model_digests.setdefault(seq, {})[name] = frame
        while len(self._model_digests) > MODEL_DIGESTS_KEPT:
            self._model_digests.popitem(last=False)

    def _diverging_layer(self, seq: int) -> int | None:
        """The first layer at which two channels' per-layer digests of request `seq` differ
        (the lowest such layer over every pair), or None."""
        frames = list(self._model_digests.get(seq, {}).values())
        found = [x for i, a in enumerate(frames) for b in frames[i + 1:]
                 if (x := first_diverging_layer(a, b)) is not None]
        return min(found) if found else None

    def _forget_digests(self, seq: int) -> None:
        self._model_digests.pop(seq, None)

    def _release_ok(self, seq: int, live: Live, agreed: Sequence[str], channel: str) -> bool:
        """Whether the output about to be released is the one the vote judged: for a model
        request byte-identical to every other agreeing channel's output (with none, equal to
        its own channel's digest); matmul requests are voted on their bytes already."""
        if live.model is None:
            return True
        c = live.results[channel]
        others = [live.results[ch] for ch in agreed if ch in live.results]
        if len(others) >= 2:
            return all(o.shape == c.shape and o.tobytes() == c.tobytes() for o in others)
        from safemon.digest import digest64

        own = self._model_digests.get(seq, {}).get(channel)
        return own is not None and digest64(c) == own[0]
