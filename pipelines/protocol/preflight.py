"""Pre-flight check: will the noise drown the votes? Warn, with the numbers, before any training.

A noisy-max aggregator answers each query with the class whose vote count plus noise is largest. If even a
*unanimous* vote — every voter for one class, the best case — comes out right barely more often than a random
class would, every answer and the model trained on the answers will be near chance, whatever the teachers
learn. :func:`unanimous_accuracy` computes that best case (a fixed-seed Monte Carlo estimate over the noise,
independent of the run's own randomness); :func:`warn_if_noise_drowns_votes` warns when it closes less than
:data:`NEAR_CHANCE_FRACTION` of the gap from chance (1/C) to 1 — the same bar the published model's test
accuracy is held to (:mod:`privfed.evaluation`).
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["NEAR_CHANCE_FRACTION", "is_near_chance", "unanimous_accuracy", "warn_if_noise_drowns_votes"]

#: "Near chance": closing less than this fraction of the gap from the chance rate to a perfect score.
NEAR_CHANCE_FRACTION = 0.25

def is_near_chance(accuracy: float, majority_class_rate: float) -> bool:
    """Whether ``accuracy`` closes less than :data:`NEAR_CHANCE_FRACTION` of the gap from ``majority_class_rate``
    (always answering the most frequent class; 1/C for C balanced classes) to 1."""
    return accuracy < majority_class_rate + NEAR_CHANCE_FRACTION * (1.0 - majority_class_rate)


#: Monte Carlo draws of the noise (standard error of the estimate below 0.008).
_SAMPLES = 4000


def unanimous_accuracy(votes: float, n_classes: int, *, aggregator: str, scale: float) -> float:
    """Probability that a noisy argmax over ``n_classes`` counts returns the class all ``votes`` went to.

    ``aggregator`` ``"laplace"``: each count gets Laplace noise of scale ``scale`` (1/γ); ``"gaussian"`` (also
    Confident GNMax's answering step): Gaussian noise of standard deviation ``scale``.
    """
    if aggregator not in ("laplace", "gaussian"):
        raise ValueError(f"aggregator must be 'laplace' or 'gaussian', got {aggregator!r}")
    if n_classes < 2:
        return 1.0
    rng = np.random.default_rng(0)
    draw = rng.laplace if aggregator == "laplace" else rng.normal
    counts = draw(0.0, scale, size=(_SAMPLES, int(n_classes)))
    counts[:, 0] += votes
    return float(np.mean(np.argmax(counts, axis=1) == 0))


def warn_if_noise_drowns_votes(algorithm: str, *, votes: float, n_classes: int, aggregator: str, scale: float,
                               what: str, advice: str) -> float:
    """Warn (UserWarning) when even a unanimous vote of ``votes`` voters is answered near chance; return its
    accuracy. ``what`` states the votes (``"each server query has at most 6 votes"``), ``advice`` what to change."""
    accuracy = unanimous_accuracy(votes, n_classes, aggregator=aggregator, scale=scale)
    chance = 1.0 / max(int(n_classes), 1)
    if is_near_chance(accuracy, chance):
        noise = f"Laplace noise of scale {scale:g} (1/gamma)" if aggregator == "laplace" else \
            f"Gaussian noise of standard deviation {scale:g} (sigma)"
        warnings.warn(
            f"{algorithm} pre-flight: {what} and gets {noise}; even a unanimous "
            f"vote is answered correctly only {accuracy:.0%} of the time with {n_classes} classes (chance: "
            f"{chance:.0%}), so the answers — and the model trained on them — will be NEAR CHANCE; {advice}",
            UserWarning, stacklevel=3,
        )
    return accuracy
