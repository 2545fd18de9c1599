"""What secret noise costs: a FedKT fit with noise from the secret source against the seeded one, side by side.

Issue 40 moved every draw a guarantee relies on to ``NoiseSource.secret()`` (randomgen's AES-128 counter mode,
keyed from ``os.urandom``); ``noise_seed=`` keeps the former path (numpy's PCG64 from a recorded seed). This
script fits FedKT on scikit-learn's digits (4 parties of 300 examples, 300 public queries, decision-tree
teachers, s = 2, t = 5) at L1 (Laplace on the server's votes), L2 (Laplace on each party's teacher votes) and
L1 with distributed Skellam noise under secure aggregation, once with secret noise and once with
``noise_seed=0``, alternating (the order swaps every repeat, so a drift in the machine's load hits both
alike), ``--repeats`` times. Per repeat it takes the ratio secret / seeded; it prints the median ratio with its
range and the mean ± sd. It also times 10⁶ Laplace draws from each generator (best of the repeats).

Run: ``python bench/secret_noise.py [--repeats 9] [--json bench/results/secret_noise/fedkt_digits.json]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path[:] = [str(Path(__file__).resolve().parents[1])] + [
    p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
from privfed.accounting import NoiseSource  # noqa: E402
from privfed.pipelines.fedkt.estimator import FedKT  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

from bench import provenance  # noqa: E402

SETTINGS = {
    "L1": dict(privacy="L1", gamma=0.5),
    "L2": dict(privacy="L2", gamma=0.5),
    "L1-skellam": dict(privacy="L1", aggregator="skellam", secure_aggregation=True, sigma=3.0),
}
MODES = {"secret": None, "seeded": 0}  # noise_seed: None draws from NoiseSource.secret(), an int from PCG64


def fit_seconds(level: str, noise_seed: int | None, parties: list, public: np.ndarray) -> float:
    model = FedKT(DecisionTreeClassifier(max_depth=8), n_partitions=2, n_teachers=5, random_state=0,
                  noise_seed=noise_seed, **SETTINGS[level])
    tick = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model.fit(parties, public)
    return time.perf_counter() - tick


def draw_seconds(generator: np.random.Generator, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        tick = time.perf_counter()
        generator.laplace(0.0, 2.0, size=1_000_000)
        best = min(best, time.perf_counter() - tick)
    return best


def summary(ratios: list[float]) -> dict:
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "mean": statistics.fmean(ratios), "sd": statistics.stdev(ratios) if len(ratios) > 1 else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", default="bench/results/secret_noise/fedkt_digits.json")
    args = parser.parse_args()
    run = provenance.start(command=" ".join(sys.argv), seeds=[0], settings=vars(args))
    X, y = load_digits(return_X_y=True)
    parties = [(X[i:1200:4], y[i:1200:4]) for i in range(4)]
    public = X[1200:1500]
    records = {}
    for level in SETTINGS:
        fit_seconds(level, None, parties, public)  # warm-up (imports, caches), not timed
        seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
        for repeat in range(args.repeats):
            order = list(MODES) if repeat % 2 == 0 else list(reversed(MODES))
            for mode in order:
                seconds[mode].append(fit_seconds(level, MODES[mode], parties, public))
        ratios = [secret / seeded for secret, seeded in zip(seconds["secret"], seconds["seeded"])]
        records[level] = {"seconds": seconds, "ratio_secret_over_seeded": ratios, "ratio": summary(ratios)}
        stats = records[level]["ratio"]
        print(f"FedKT-{level} fit: secret {statistics.median(seconds['secret']):.3f} s, seeded "
              f"{statistics.median(seconds['seeded']):.3f} s (medians of {args.repeats}); ratio secret/seeded "
              f"median {stats['median']:.3f} [{stats['min']:.3f}, {stats['max']:.3f}], mean {stats['mean']:.3f} "
              f"± {stats['sd']:.3f}", flush=True)
    draws = {"secret": draw_seconds(NoiseSource.secret().generator, args.repeats),
             "seeded": draw_seconds(NoiseSource.seeded(0).generator, args.repeats)}
    records["laplace_draws_1e6_best_seconds"] = draws
    print(f"10⁶ Laplace draws: secret {draws['secret'] * 1e3:.1f} ms, seeded {draws['seeded'] * 1e3:.1f} ms "
          f"(×{draws['secret'] / draws['seeded']:.2f}, best of {args.repeats})", flush=True)
    provenance.write_json(Path(args.json), {"provenance": provenance.finish(run), "records": records})


if __name__ == "__main__":
    main()
