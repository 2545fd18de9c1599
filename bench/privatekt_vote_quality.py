"""Diagnostic: how often a PrivateKT round's aggregated label is right, under privfed's split and the authors'.

PrivateKT's global network learns only from the aggregated labels in its buffer (and from
self-training on its own predictions); the clients' data reach it through nothing else. So the
one channel through which the client split can move the accuracy curve — apart from changing
every later random draw of the run — is how often the aggregate of a round's 40 clients names
the right class. This script measures that directly, from the same global network under both
splits (``bench/privatekt.py``'s settings: MNIST, 12,000 public images, 80 clients, Dir(0.5),
40 clients per round, 5 local epochs of SGD 0.05 in batches of 32, the authors' CNN with Keras's
initialisation, ε = 5 per report of K = 2 labels):

1. the round's 40 clients (drawn at random) each train a copy of the global network on their
   data (privfed's batched client training, as ``PrivateKT`` does it);
2. every copy labels the same ``--queries`` random public images (not only K = 2, to measure rates);
3. per image: the clients' plurality label without noise, and the server's aggregate after each
   client's randomized response (``perturb_labels``, then ``aggregate_reports``: the unbiased count
   estimate's argmax), repeated ``--noise-draws`` times.

Printed and written (``--json``) per split and partition seed: the clients' sizes, their local
accuracy on the images, and the share of images whose plurality / noisy aggregate is right — over
all images and over the tenth the global network is least sure of (highest entropy; importance
sampling favours those). ``--global start`` is a round-1 network (Keras's initialisation, seeded by
the partition seed; all clients start from it, as in ``PrivateKT``'s round 1); ``--global CKPT.npz``
is a ``bench/privatekt.py --checkpoint`` file's global network, the same for both splits.

Run: ``python bench/privatekt_vote_quality.py --global start --seeds 0 1 --json OUT.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path[:] = [str(Path(__file__).resolve().parents[1])] + [
    p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from privfed.accounting.randomized_response import randomized_response_keep_probability  # noqa: E402
from privfed.pipelines.batched_training import train_copies  # noqa: E402
from privfed.pipelines.datasets import load_dataset  # noqa: E402
from privfed.pipelines.partition import dirichlet_partition, label_mixture_partition  # noqa: E402
from privfed.pipelines.privatekt import predictive_entropy  # noqa: E402
from privfed.pipelines.privatekt_steps import (  # noqa: E402
    PrivateKTReport,
    aggregate_reports,
    network_from_parameters,
    perturb_labels,
)
from privfed.pipelines.torch_models import KerasInitialised, TorchClassifier  # noqa: E402
from privfed.pipelines.voting import prediction_votes  # noqa: E402

sys.path.insert(1, str(Path(__file__).resolve().parent))
from privatekt import authors_cnn, public_and_private_rows  # noqa: E402

N_CLIENTS, PER_ROUND, N_CLASSES = 80, 40, 10


def split(y_private: np.ndarray, kind: str, seed: int) -> list[np.ndarray]:
    """The clients' rows, as ``bench/privatekt.py --split`` draws them."""
    if kind == "authors":
        return label_mixture_partition(y_private, N_CLIENTS, 0.5, party_size=600, random_state=seed)
    return dirichlet_partition(y_private, N_CLIENTS, 0.5, min_size=10, random_state=seed)


def global_network(model: TorchClassifier, source: str, seed: int,
                   input_shape: tuple[int, ...]) -> tuple[TorchClassifier, list[int]]:
    """The network the clients start from and their training seeds (round 1: all the network's own seed)."""
    if source == "start":
        return model.set_params(random_state=seed), [seed] * PER_ROUND
    with np.load(source, allow_pickle=False) as stored:
        parameters = stored["global_parameters"]
    network = network_from_parameters(model, parameters, N_CLASSES, input_shape)
    return network, [int(s) for s in np.random.default_rng(seed).integers(2**31, size=PER_ROUND)]


def measure(X: np.ndarray, y: np.ndarray, *, kind: str, seed: int, source: str, queries: int,
            noise_draws: int) -> dict:
    public_rows, private_rows = public_and_private_rows(seed)
    parts = split(y[private_rows], kind, seed)
    rng = np.random.default_rng([seed, 17])
    chosen = np.sort(rng.choice(N_CLIENTS, size=PER_ROUND, replace=False))
    X_private, y_private = X[private_rows], y[private_rows]
    data = [(X_private[parts[i]], y_private[parts[i]]) for i in chosen]
    model = TorchClassifier(KerasInitialised(authors_cnn), optimizer="sgd", lr=0.05, momentum=0.0, batch_size=32,
                            epochs=5)
    network, states = global_network(model, source, seed, X.shape[1:])
    eye = np.eye(N_CLASSES)
    tick = time.perf_counter()
    copies = train_copies(network, [(Xi, eye[yi]) for Xi, yi in data], random_states=states,
                          classes=np.arange(N_CLASSES), loss="kl")
    seconds = time.perf_counter() - tick
    asked = rng.choice(public_rows, size=queries, replace=False)
    truth = y[asked]
    predictions = copies.predict(X[asked]).astype(np.int64)  # (clients, queries)

    counts = prediction_votes(predictions, N_CLASSES)
    top = counts.max(axis=1, keepdims=True)
    plurality_right = (counts[np.arange(queries), truth] == top[:, 0]) / (counts == top).sum(axis=1)  # ties: share
    beta = randomized_response_keep_probability(5.0, num_classes=N_CLASSES, labels_per_report=2)
    noisy_right = np.zeros(queries)
    for _ in range(noise_draws):
        reports = [PrivateKTReport(perturb_labels(row, keep_probability=beta, num_classes=N_CLASSES, rng=rng))
                   for row in predictions]
        noisy_right += aggregate_reports(reports, n_classes=N_CLASSES, keep_probability=beta, rng=rng) == truth
    noisy_right /= noise_draws
    if source == "start":
        unsure = np.ones(queries, dtype=bool)  # round 1: no global network yet; importance sampling is uniform
    else:
        uncertainty = predictive_entropy(network.predict_proba(X[asked]))
        unsure = uncertainty >= np.quantile(uncertainty, 0.9)

    sizes = np.array([len(yi) for _, yi in data])
    holders = [int(sum(np.mean(yi == c) >= 0.1 for _, yi in data)) for c in range(N_CLASSES)]
    return {
        "split": kind, "seed": seed, "global": source, "queries": queries, "noise_draws": noise_draws,
        "keep_probability": beta, "train_seconds": seconds, "torch_threads": torch.get_num_threads(),
        "client_sizes": {"min": int(sizes.min()), "median": float(np.median(sizes)), "max": int(sizes.max())},
        "clients_holding_10pct_of_class": holders,
        "local_accuracy": {"mean": float(np.mean(predictions == truth)),
                           "per_client": np.mean(predictions == truth, axis=1).round(4).tolist()},
        "plurality_right": float(plurality_right.mean()),
        "noisy_aggregate_right": float(noisy_right.mean()),
        "unsure_tenth": {"plurality_right": float(plurality_right[unsure].mean()),
                         "noisy_aggregate_right": float(noisy_right[unsure].mean())},
        "per_class_noisy_aggregate_right": [float(noisy_right[truth == c].mean()) for c in range(N_CLASSES)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument("--global", dest="source", default="start",
                        help="'start' (round 1's network) or a bench/privatekt.py --checkpoint .npz file")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--splits", nargs="+", choices=("dirichlet", "authors"), default=["dirichlet", "authors"])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--noise-draws", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.source != "start" and not Path(args.source).is_file():
        parser.error(f"--global must be 'start' or an existing checkpoint file; got {args.source!r}")
    for name in ("queries", "noise_draws", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer; got {getattr(args, name)}")
    torch.set_num_threads(args.threads)
    mnist = load_dataset("mnist", args.data)
    X, y = mnist.X_train.astype(np.float32) / 255.0, mnist.y_train

    records = []
    for seed in args.seeds:
        for kind in args.splits:
            record = measure(X, y, kind=kind, seed=seed, source=args.source, queries=args.queries,
                             noise_draws=args.noise_draws)
            records.append(record)
            print(f"seed {seed}, {kind:9s} split: clients {record['client_sizes']['min']}–"
                  f"{record['client_sizes']['max']} images; local accuracy {record['local_accuracy']['mean']:.3f}; "
                  f"plurality right {record['plurality_right']:.3f}; noisy aggregate right "
                  f"{record['noisy_aggregate_right']:.3f} "
                  f"(least sure tenth {record['unsure_tenth']['noisy_aggregate_right']:.3f}); "
                  f"{record['train_seconds']:.0f} s", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps({"command": "python " + " ".join(sys.argv),
                                                       "records": records}, indent=2))


if __name__ == "__main__":
    main()
