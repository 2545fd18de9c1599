"""docs/results.md, "What secret noise costs (issue 40)": fits and DP-SGD epochs, secret noise against seeded noise."""

from __future__ import annotations

from typing import Any

from bench.tables import table

FEDKT = "bench/results/secret_noise/fedkt_digits.json"
DPSGD = "bench/results/dpsgd_secret_noise.json"

_FEDKT_ROWS = {"L1": "FedKT-L1 fit (Laplace noisy max at the server)",
               "L2": "FedKT-L2 fit (each party's noisy labels)",
               "L1-skellam": "FedKT-L1 fit, Skellam shares + secure sum (in process)"}


def _spread(ratios: list[float]) -> str:
    ordered = sorted(ratios)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return f"×{median:.2f} [{ordered[0]:.2f}, {ordered[-1]:.2f}]"


@table("secret-noise-cost", raw=(FEDKT, DPSGD))
def secret_noise_cost(documents: list[Any]) -> str:
    """Secret (randomgen AES-CTR from OS entropy) over seeded (numpy PCG64; before issue 40, Opacus' loader and
    torch's generator for DP-SGD) in the same run, alternating: the median ratio [min, max] over the repeats."""
    fedkt, dpsgd = documents
    repeats = fedkt["provenance"]["settings"]["repeats"]
    lines = ["| what | repeats | time, secret ÷ seeded: median [min, max] |", "|---|---|---|"]
    for key, label in _FEDKT_ROWS.items():
        lines.append(f"| {label}, digits | {repeats} | {_spread(fedkt['records'][key]['ratio_secret_over_seeded'])}"
                     " wall |")
    draws = fedkt["records"]["laplace_draws_1e6_best_seconds"]
    lines.append(f"| 10⁶ Laplace draws alone (best of the repeats) | {repeats} | "
                 f"×{draws['secret'] / draws['seeded']:.2f} ({draws['secret'] * 1e3:.1f} ms ÷ "
                 f"{draws['seeded'] * 1e3:.1f} ms) |")
    settings = dpsgd["settings"]
    for name, model in dpsgd["models"].items():
        lines.append(f"| DP-SGD epoch, Torch{name.upper()} ({model['n_parameters']:,} parameters; "
                     f"{dpsgd['n_examples']:,} MNIST images, q = {dpsgd['release']['sample_rate']:.4f}) | "
                     f"{settings['repeats']} | "
                     f"{_spread(model['cpu_ratio_now_over_before'])} CPU, "
                     f"{_spread(model['ratio_now_over_before'])} wall |")
    return "\n".join(lines)
