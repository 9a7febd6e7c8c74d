"""A small inference app protected by safemon: an MLP classifying scikit-learn's digits.

    python examples/digits_mlp.py            # plain NumPy, no safemon
    python examples/digits_mlp.py --safemon  # each batch as one whole-model request to a
                                             # running daemon (start one with `safemon run`)
    python examples/digits_mlp.py --safemon --per-layer   # one matmul request per layer

The model (64 → 64 (ReLU) → 10) is trained at first use in a few seconds and cached in
~/.cache/safemon. With --safemon the weights are registered once and the two layers
(weight, bias, activation) once as a model; `Client.run` then runs the whole forward pass
in every channel and the daemon votes once on its output and per-layer digests. While the
daemon runs 1oo1D (configured, or a 1oo2D deployment degraded to it), which cannot vote a
whole model, the client sends that batch layer by layer (`Client(per_layer_fallback=True)`).
For the full story with fault injection, run `safemon demo`.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from safemon.demo.app import LAYERS, batch_slices, load_or_train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--safemon", action="store_true", help="compute through safemon.Client")
    parser.add_argument("--config", default=None, help="safemon configuration (with --safemon)")
    parser.add_argument("--batch", type=int, default=32, help="samples per request")
    parser.add_argument("--per-layer", action="store_true",
                        help="with --safemon: one matmul request per layer")
    args = parser.parse_args(argv)

    model, x, y, trained = load_or_train()
    if trained:
        print("trained the model and cached it", file=sys.stderr)
    pred = np.empty_like(y)
    per_layer = 0
    t0 = time.perf_counter()
    if args.safemon:
        from safemon.client import Client

        with Client(args.config, per_layer_fallback=True) as client:
            ids = {name: client.register_weight(model.weights[name]) for name in LAYERS}
            model_id = client.register_model(model.layers(ids))

            def matmul(xb: np.ndarray, weight_id: str) -> np.ndarray:
                return np.asarray(client.matmul(xb, weight_id, timeout=2.0))

            for sl in batch_slices(len(y), args.batch):
                if args.per_layer:
                    pred[sl] = model.predict(x[sl], matmul, ids)
                else:
                    logits = client.run(model_id, np.ascontiguousarray(x[sl]), timeout=2.0)
                    pred[sl] = np.argmax(logits, axis=1)
                    per_layer += client.last_run_per_layer
    else:
        for sl in batch_slices(len(y), args.batch):
            pred[sl] = model.predict(x[sl])
    elapsed = time.perf_counter() - t0
    how = "plain NumPy"
    if args.safemon:
        how = ("through safemon, one matmul request per layer" if args.per_layer else
               f"through safemon, whole-model requests ({per_layer} batches layer by layer)")
    print(f"accuracy {np.mean(pred == y):.4f} on {len(y)} test digits in {elapsed * 1e3:.1f} ms"
          f" ({how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
