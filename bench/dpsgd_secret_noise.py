"""Benchmark: DP-SGD epochs with secret sampling and noise (privfed now) against Opacus's torch generators (before).

Issue 40 moved DP-SGD's Poisson sampling and Gaussian noise from torch generators seeded from
``random_state`` (Opacus's ``DPDataLoader`` and ``noise_generator``, predictable from the ledger) to a
secret :class:`~privfed.accounting.NoiseSource` (randomgen's AES-CTR behind numpy): the batches are drawn
as index arrays from it and the noise of every parameter by one ``standard_normal`` call, moved to torch.
This times one DP-SGD epoch both ways, side by side in one process: the same network, initialisation,
optimizer, data and release (σ = 1, C = 1, q = 64/n, B = 64), the two paths alternating (their order swapped
every repeat), ``--repeats`` times each, one torch thread.

* ``before``: the previous :func:`~pipelines.models.dp_training.train_dp_sgd`, kept here verbatim for the comparison:
  Opacus's ``PrivacyEngine.make_private`` over a ``DPDataLoader`` with a seeded ``torch.Generator`` and
  ``noise_generator`` seeded with the seed + 1.
* ``now``: :func:`pipelines.models.dp_training.train_dp_sgd` with ``NoiseSource.secret()``.

Models: FedKT's small CNN (2 × 5×5 conv, 120-84) and the paper's MLP (784-100-100-10, whose cheap steps make
the noise draw the largest share), on party 0's MNIST share as ``bench/dpsgd.py`` splits it (20 parties,
Dirichlet α = 1). Printed per model: the median seconds per epoch of each path, the paired ratio now / before
(median, min, max over the repeats) in wall time and in this process's CPU time (which other processes on a
shared machine disturb less; one torch thread, so CPU time is the work done) and, for scale, the time of one step's draws alone (numpy AES-CTR against
torch's generator). ``--json`` writes everything with the run's provenance (``bench/provenance.py``).

Run: ``nice -n 10 python bench/dpsgd_secret_noise.py [--data ../shared/datasets]
[--json bench/results/dpsgd_secret_noise.json]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

# Run from the checkout this file is in: its folder's bench/accounting.py must not shadow the package.
_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (_ROOT, _ROOT / "bench")]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from privfed.accounting import NoiseSource  # noqa: E402
from privfed.pipelines import DPConfig  # noqa: E402
from privfed.pipelines.data.datasets import federated_split, load_dataset  # noqa: E402
from privfed.pipelines.models.dp_training import plan_release, train_dp_sgd  # noqa: E402
from privfed.pipelines.models.torch_models import TorchCNN, TorchMLP  # noqa: E402
from torch.nn import functional  # noqa: E402

from bench import provenance  # noqa: E402


def opacus_generators_epochs(module, optimizer, inputs, targets, loss_fn, *, release, max_grad_norm, epochs, seed,
                             expected_batch_size):
    """The previous ``train_dp_sgd`` (privfed before issue 40): Opacus's loader and noise on seeded torch generators."""
    from opacus import PrivacyEngine
    from opacus.data_loader import DPDataLoader

    n = len(inputs)
    dataset = torch.utils.data.TensorDataset(inputs, targets)
    loader = DPDataLoader(dataset, sample_rate=release.sample_rate,
                          generator=torch.Generator(device="cpu").manual_seed(seed))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        engine = PrivacyEngine(accountant="rdp")
    private_module, private_optimizer, loader = engine.make_private(
        module=module, optimizer=optimizer, data_loader=loader, noise_multiplier=release.noise_multiplier,
        max_grad_norm=max_grad_norm, poisson_sampling=False,
        noise_generator=torch.Generator(device=inputs.device).manual_seed(seed + 1),
    )
    private_optimizer.expected_batch_size = release.sample_rate * n if expected_batch_size is None else float(
        expected_batch_size)
    losses = []
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            private_module.train()
            for _ in range(epochs):
                total, count = 0.0, 0
                for batch_inputs, batch_targets in loader:
                    private_optimizer.zero_grad()
                    outputs = private_module(batch_inputs)
                    if len(batch_inputs):
                        batch_loss = loss_fn(outputs, batch_targets)
                        total, count = total + float(batch_loss.detach()) * len(batch_inputs), count + len(batch_inputs)
                    else:
                        batch_loss = outputs.sum() * 0.0
                    batch_loss.backward()
                    private_optimizer.step()
                losses.append(total / count if count else float("nan"))
    finally:
        private_module._close()
    return losses


def draw_seconds(n_parameters: int, n_examples: int, repeats: int = 200) -> dict[str, float]:
    """Seconds for one step's draws alone: the noise of every parameter and the Poisson coins of every example."""
    secret = NoiseSource.secret().generator
    generator = torch.Generator().manual_seed(0)
    reference = torch.zeros(n_parameters)
    timings = {}
    for name, draw in (
        ("noise_numpy_aes", lambda: torch.from_numpy(secret.standard_normal(n_parameters, dtype=np.float32))),
        ("noise_torch", lambda: torch.normal(0.0, 1.0, size=reference.shape, generator=generator)),
        ("coins_numpy_aes", lambda: np.flatnonzero(secret.random(n_examples) < 0.02)),
        ("coins_torch", lambda: (torch.rand(n_examples, generator=generator) < 0.02).nonzero()),
    ):
        start = time.perf_counter()
        for _ in range(repeats):
            draw()
        timings[name] = (time.perf_counter() - start) / repeats
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument("--parties", type=int, default=20)
    parser.add_argument("--party", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"], choices=["mlp", "cnn"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not (Path(args.data) / "mnist.npz").is_file():
        print(f"skipped: {Path(args.data) / 'mnist.npz'} is absent")
        return
    torch.set_num_threads(1)
    run = provenance.start(command=" ".join(["python", *sys.argv]), seeds=[args.seed],
                           settings={key: value for key, value in vars(args).items() if key != "json"})
    mnist = load_dataset("mnist", args.data)
    split = federated_split(mnist.X_train, mnist.y_train, n_parties=args.parties, beta=1.0, public_size=10_000,
                            X_test=mnist.X_test, y_test=mnist.y_test, random_state=args.seed)
    X, y = split.parties[args.party]
    inputs = torch.from_numpy(np.ascontiguousarray(np.asarray(X, dtype=np.float32).reshape(len(y), -1) / 255.0))
    targets = torch.from_numpy(np.asarray(y, dtype=np.int64))
    n = len(y)
    config = DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5, sample_rate=64 / n, expected_batch_size=64)
    release = plan_release(config, n=n, batch_size=64, epochs=args.epochs)
    prototypes = {"mlp": TorchMLP(hidden=(100, 100)), "cnn": TorchCNN()}
    results = {}
    for name in args.models:
        seconds: dict[str, list[float]] = {"before": [], "now": []}
        cpu_seconds: dict[str, list[float]] = {"before": [], "now": []}
        losses: dict[str, list[float]] = {"before": [], "now": []}
        n_parameters = 0
        for repeat in range(args.repeats):
            order = ("before", "now") if repeat % 2 == 0 else ("now", "before")
            for path in order:
                torch.manual_seed(repeat)
                module = prototypes[name]._build_module(tuple(inputs.shape[1:]), 10)
                n_parameters = sum(p.numel() for p in module.parameters())
                optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
                common = dict(release=release, max_grad_norm=1.0, epochs=args.epochs, expected_batch_size=64)
                start, cpu_start = time.perf_counter(), time.process_time()
                if path == "before":
                    curve = opacus_generators_epochs(module, optimizer, inputs, targets, functional.cross_entropy,
                                                     seed=args.seed + repeat, **common)
                else:
                    curve = train_dp_sgd(module, optimizer, inputs, targets, functional.cross_entropy,
                                         noise=NoiseSource.secret(), **common)
                seconds[path].append((time.perf_counter() - start) / args.epochs)
                cpu_seconds[path].append((time.process_time() - cpu_start) / args.epochs)
                losses[path].append(curve[-1])
        ratios = [now / before for now, before in zip(seconds["now"], seconds["before"])]
        cpu_ratios = [now / before for now, before in zip(cpu_seconds["now"], cpu_seconds["before"])]
        median = {path: statistics.median(values) for path, values in seconds.items()}
        draws = draw_seconds(n_parameters, n)
        results[name] = {"n_parameters": n_parameters, "seconds_per_epoch": seconds, "median": median,
                         "ratio_now_over_before": ratios, "cpu_seconds_per_epoch": cpu_seconds,
                         "cpu_ratio_now_over_before": cpu_ratios, "last_epoch_loss": losses,
                         "one_step_draw_seconds": draws}
        print(f"{name}: {n_parameters} parameters, {n} examples, {release.steps // args.epochs} steps per epoch, "
              f"{args.repeats} repeats, one torch thread")
        for path in seconds:
            print(f"  {path:>6}: {median[path]:.3f} s/epoch (runs {', '.join(f'{s:.3f}' for s in seconds[path])})")
        for what, values in (("wall", ratios), ("CPU", cpu_ratios)):
            print(f"  now / before, {what} time: median {statistics.median(values):.3f}× "
                  f"(min {min(values):.3f}, max {max(values):.3f})")
        print("  one step's draws alone: " + ", ".join(f"{key} {value * 1e6:.0f} µs" for key, value in draws.items()))
    if args.json:
        provenance.write_json(args.json, {"provenance": provenance.finish(run), "settings": vars(args),
                                          "n_examples": n, "release": release.parameters(), "models": results})


if __name__ == "__main__":
    main()
