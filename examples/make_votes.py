"""Write ``examples/votes.npy``: the server-side votes of a FedKT-L1-like run on Adult.

81 public queries (FedKT's 1 % of Adult's held-out split), 2 classes, 50
parties voting with consistent voting (s = 2 votes per party when its two
students agree, none otherwise). The votes are simulated with a fixed seed
(students that agree with a latent label with a probability that varies per
query), so the file is small, reproducible and contains no real data.

Run: ``python examples/make_votes.py``.
"""

from pathlib import Path

import numpy as np

N_QUERIES, N_PARTIES, N_PARTITIONS = 81, 50, 2


def simulate_votes(seed: int = 20210801) -> np.ndarray:
    rng = np.random.default_rng(seed)
    latent = rng.integers(0, 2, size=N_QUERIES)
    agreement = rng.uniform(0.55, 0.98, size=N_QUERIES)
    # Each party's s students predict the latent label with the query's agreement rate.
    correct = rng.random((N_QUERIES, N_PARTIES, N_PARTITIONS)) < agreement[:, None, None]
    predictions = np.where(correct, latent[:, None, None], 1 - latent[:, None, None])
    consistent = (predictions == predictions[:, :, :1]).all(axis=2)
    votes = np.zeros((N_QUERIES, 2), dtype=np.int64)
    for label in (0, 1):
        votes[:, label] = N_PARTITIONS * (consistent & (predictions[:, :, 0] == label)).sum(axis=1)
    return votes


if __name__ == "__main__":
    path = Path(__file__).with_name("votes.npy")
    np.save(path, simulate_votes())
    print(f"wrote {path}")
