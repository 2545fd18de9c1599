"""Check: can PrivateKT's global model learn from its knowledge buffer with plain SGD? (issue 17, docs/results.md)

PrivateKT's global model learns only from the buffer (K = 2 aggregated labels per round, the last B = 25 rounds)
and from self-training on its own confident predictions. privfed's reproduction with plain SGD (the authors'
optimizer, lr 0.05) stays at chance for many rounds where the authors' Keras run reaches 21 % at round 5 and
30 % at round 10. This isolates the server's side: no clients, the buffer filled with the public examples'
*true* labels (the best any aggregate can give), everything else as the authors' code (``Code/PrivateKT.py`` of
taoqi98/PrivateKT): importance sampling by entropy, fine-tuning, self-training on M = 1,200 confident examples.

Varied, one at a time: the network (the authors' CNN or FedKT's small CNN), its initialisation (torch's default
or Keras's: Glorot-uniform weights, zero biases — the authors' code is Keras), and the fine-tuning (privfed's
``fine_tune_epochs=4`` epochs in mini-batches of 32, or the authors' ``train_on_batch`` four times: four steps on
the whole buffer). Prints and writes (``--json``) test accuracy after every round. One torch thread.

Run: ``nice -n 10 python bench/privatekt_buffer_check.py --rounds 20 --json bench/results/privatekt_buffer_check.json``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
import privatekt as bench  # noqa: E402  (sets the import path: this checkout's privfed)
import torch  # noqa: E402
from privfed.pipelines.datasets import load_dataset  # noqa: E402
from privfed.pipelines.privatekt import KnowledgeBuffer, importance_sample, predictive_entropy  # noqa: E402
from privfed.pipelines.torch_models import KerasInitialised, TorchClassifier  # noqa: E402


def run(builder, fine_tune: str, public: np.ndarray, y_public: np.ndarray, X_test: np.ndarray, y_test: np.ndarray,
        rounds: int, seed: int) -> list[float]:
    """Test accuracy after each round of buffer fine-tuning and self-training, from true buffer labels."""
    rng = np.random.default_rng(seed)
    model = TorchClassifier(builder, optimizer="sgd", lr=0.05, momentum=0.0, batch_size=32, random_state=seed)
    buffer, classes, fitted, curve = KnowledgeBuffer(25), np.arange(10), False, []
    for _ in range(rounds):
        entropy = predictive_entropy(model.predict_proba(public)) if fitted else np.zeros(len(public))
        queries = importance_sample(entropy, 2, rng, uncertain=True)
        buffer.push(queries, y_public[queries])
        indices, labels = buffer.contents()
        full_batch = fine_tune == "four steps on the whole buffer"
        model.set_params(epochs=4, batch_size=len(indices) if full_batch else 32, random_state=int(rng.integers(2**31)))
        model.fit_soft(public[indices], np.eye(10)[labels], loss="kl", classes=classes, warm_start=fitted)
        fitted = True
        proba = model.predict_proba(public)
        chosen = importance_sample(predictive_entropy(proba), 1200, rng, uncertain=False)
        model.set_params(epochs=1, batch_size=32, random_state=int(rng.integers(2**31)))
        model.fit_soft(public[chosen], proba[chosen], loss="kl", classes=classes, warm_start=True)
        curve.append(float(np.mean(model.predict(X_test) == y_test)))
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    mnist = load_dataset("mnist", args.data)
    order = np.random.default_rng(args.seed).permutation(len(mnist.y_train))  # bench/privatekt.py's public set
    X = mnist.X_train.astype(np.float32) / 255.0
    public, y_public = X[order[:12_000]], mnist.y_train[order[:12_000]]
    X_test, y_test = mnist.X_test.astype(np.float32) / 255.0, mnist.y_test
    variants = [
        ("authors' CNN", "torch", "4 epochs, batches of 32"),
        ("authors' CNN", "keras", "4 epochs, batches of 32"),
        ("authors' CNN", "torch", "four steps on the whole buffer"),
        ("authors' CNN", "keras", "four steps on the whole buffer"),
        ("small CNN", "torch", "4 epochs, batches of 32"),
        ("small CNN", "keras", "4 epochs, batches of 32"),
    ]
    networks = {"authors' CNN": bench.authors_cnn, "small CNN": bench.small_cnn}
    rows = []
    for network, init, fine_tune in variants:
        builder = networks[network] if init == "torch" else KerasInitialised(networks[network])
        tick = time.perf_counter()
        curve = run(builder, fine_tune, public, y_public, X_test, y_test, args.rounds, args.seed)
        rows.append({"network": network, "init": init, "fine_tune": fine_tune, "accuracy": curve,
                     "seconds": time.perf_counter() - tick})
        shown = ", ".join(f"{r}: {curve[r - 1]:.3f}" for r in (1, 5, 10, 15, 20) if r <= len(curve))
        print(f"{network}, {init} init, fine-tuning {fine_tune}: {shown}", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"command": "python " + " ".join(sys.argv), "rows": rows,
                                                   "authors_log": bench.AUTHORS_LOG}, indent=1))


if __name__ == "__main__":
    main()
