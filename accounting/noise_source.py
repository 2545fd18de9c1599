"""Where the randomness a privacy guarantee relies on comes from.

Every ε privfed prints assumes that whoever observes a release cannot predict the
noise in it. A :class:`NoiseSource` is the only place privfed draws such noise —
additive and noisy-max noise, Skellam shares, randomized-response coins, DP-SGD
noise and its Poisson sampling, selector noise — and it has exactly two kinds:

* :meth:`NoiseSource.secret` (the default everywhere): a ``numpy.random.Generator``
  over randomgen's AES-128 counter-mode bit generator (``randomgen.AESCounter``),
  keyed with 128 bits read from the operating system's cryptographically secure
  source (:func:`os.urandom`) on the machine that adds the noise. The key is never
  derived from ``random_state``, never sent in a message and never recorded: a
  secret source refuses to be pickled or copied, and :meth:`provenance` names the
  generator, not its state. AES-CTR is a standard cryptographically secure
  pseudo-random generator (NIST SP 800-90A's CTR_DRBG is built on it); predicting
  its output without the key means breaking AES.
* :meth:`NoiseSource.seeded` (opt-in, ``noise_seed=`` on the estimators): numpy's
  PCG64 from a recorded seed, so that tests and reproductions repeat a run bit for
  bit. Whoever holds the seed regenerates every draw, so a ledger whose noise came
  from a seeded source records the seed and an unaccounted release that makes
  every ε ∞ for its holders (:func:`record_noise_provenance`); ``privfed audit``
  fails such a bundle as a release.

``random_state`` stays what it was: the seed of everything no guarantee relies on
(splits, model initialisation, query order, shuffles).

Floating-point noise on a released argmax (FedKT's and PrivateKT's votes). The
attack of Mironov (CCS 2012) reads the low-order bits of a *released* noisy
floating-point value: the set of doubles ``x + noise`` can reach differs with
``x``. privfed's noisy-max releases publish only ``argmax_j (v_j + noise_j)`` (and,
for the confident aggregator, one threshold comparison): the noise enters the
output only through order comparisons, so there are no low-order bits to read.
What remains is the difference between the floating-point sampler's law and the
ideal law on the comparison events, a total variation of the order of the
sampler's resolution (2⁻⁵³ per uniform draw) per query; privfed states it as an
assumption and does not add it to δ. Releases of noisy values themselves are
integer-valued where the noise is (Skellam shares sum to an integer histogram).
"""

from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np

__all__ = ["NOISE_SECRET", "NOISE_SEEDED", "NoiseSource", "check_noise_seed", "noise_provenance_problem"]

#: ``provenance()["source"]`` of a secret source.
NOISE_SECRET = "secret"
#: ``provenance()["source"]`` of a source derived from a recorded seed.
NOISE_SEEDED = "seeded"

_SECRET_GENERATOR = ("randomgen.AESCounter (AES-128 in counter mode) behind numpy.random.Generator, keyed with "
                     "128 bits from os.urandom on the machine that adds the noise; the key is never sent or recorded")
_SEEDED_GENERATOR = "numpy.random.PCG64 from the recorded noise_seed (reproducible: not a guarantee)"


def check_noise_seed(noise_seed: object, name: str = "noise_seed") -> int | None:
    """``noise_seed`` as an ``int`` in [0, 2**63), or None; a one-line error otherwise."""
    if noise_seed is None:
        return None
    if isinstance(noise_seed, bool) or not isinstance(noise_seed, numbers.Integral):
        raise TypeError(f"{name} must be None (secret noise) or a non-negative int, got {noise_seed!r}")
    if not 0 <= int(noise_seed) < 2**63:
        raise ValueError(f"{name} must be None (secret noise) or an int in [0, 2**63), got {noise_seed!r}")
    return int(noise_seed)


def _secret_generator() -> np.random.Generator:
    from randomgen import AESCounter  # the accounting layer's one dependency beyond numpy, scipy, dp-accounting

    key = int.from_bytes(os.urandom(16), "little")
    return np.random.Generator(AESCounter(key=key, counter=0))


class NoiseSource:
    """The source of one party's (or the server's) privacy noise: secret by default, seeded only on request.

    Create one with :meth:`secret` or :meth:`seeded` (or :meth:`for_task` from a
    message's ``noise_seed``); draw with :attr:`generator` (a ``numpy.random.Generator``).

    Examples
    --------
    >>> from accounting.noise_source import NoiseSource
    >>> source = NoiseSource.secret()
    >>> source.reproducible, source.provenance()["source"]
    (False, 'secret')
    >>> a, b = NoiseSource.seeded(7), NoiseSource.seeded(7)
    >>> bool((a.generator.laplace(size=3) == b.generator.laplace(size=3)).all())
    True
    """

    __slots__ = ("_generator", "_seed")

    def __init__(self, *, _seed: int | None, _generator: np.random.Generator) -> None:
        self._seed = _seed
        self._generator = _generator

    @classmethod
    def secret(cls) -> NoiseSource:
        """A fresh secret source, keyed from this machine's OS entropy."""
        return cls(_seed=None, _generator=_secret_generator())

    @classmethod
    def seeded(cls, noise_seed: int) -> NoiseSource:
        """A reproducible source from ``noise_seed`` (for tests and reproductions; ε is ∞ for the seed's holders)."""
        seed = check_noise_seed(noise_seed)
        if seed is None:
            raise TypeError("NoiseSource.seeded needs an int noise_seed; use NoiseSource.secret() for secret noise")
        return cls(_seed=seed, _generator=np.random.default_rng(seed))

    @classmethod
    def for_task(cls, noise_seed: int | None) -> NoiseSource:
        """The source a party builds from its task: secret when the task carries no ``noise_seed`` (the default)."""
        seed = check_noise_seed(noise_seed)
        return cls.secret() if seed is None else cls.seeded(seed)

    @property
    def reproducible(self) -> bool:
        """True for a seeded source: whoever holds the seed regenerates every draw."""
        return self._seed is not None

    @property
    def generator(self) -> np.random.Generator:
        """The ``numpy.random.Generator`` to draw from."""
        return self._generator

    def child_seeds(self, n: int) -> list[int | None]:
        """``n`` seeds for the sources of others (parties, rounds): all None for a secret source (each draws its
        own), else ``n`` independent seeds derived from this one's seed and position (nothing drawn from it)."""
        if self._seed is None:
            return [None] * n
        children = np.random.SeedSequence(self._seed).spawn(n)
        return [int(child.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for child in children]

    def spawn(self, n: int) -> list[NoiseSource]:
        """``n`` independent sources: fresh secret ones, or seeded from :meth:`child_seeds`."""
        return [NoiseSource.for_task(seed) for seed in self.child_seeds(n)]

    def provenance(self) -> dict[str, Any]:
        """What a ledger records: the kind of source and the generator — and the seed only when seeded."""
        if self._seed is None:
            return {"source": NOISE_SECRET, "generator": _SECRET_GENERATOR}
        return {"source": NOISE_SEEDED, "generator": _SEEDED_GENERATOR, "noise_seed": self._seed}

    def __repr__(self) -> str:
        return "NoiseSource.secret()" if self._seed is None else f"NoiseSource.seeded({self._seed})"

    def __reduce__(self) -> Any:
        if self._seed is None:
            raise TypeError("a secret NoiseSource cannot be pickled or copied: its key must never leave the "
                            "process that draws from it")
        return (_restore_seeded, (self._seed, self._generator.bit_generator.state))


def _restore_seeded(seed: int, state: dict[str, Any]) -> NoiseSource:
    source = NoiseSource.seeded(seed)
    source.generator.bit_generator.state = state
    return source


def noise_provenance_problem(provenance: object) -> str | None:
    """Why a ledger's recorded noise provenance does not support its ε, or None when the noise was secret.

    ``provenance`` is a ledger's ``noise`` field: None (a ledger written before privfed recorded it), or a
    :meth:`NoiseSource.provenance` mapping.
    """
    if provenance is None:
        return ("the ledger does not record where its noise came from (written before privfed drew noise from a "
                "secret source): until privfed 0.2 every draw derived from random_state, which the ledger records, "
                "so any holder could regenerate the noise")
    if not isinstance(provenance, dict) or provenance.get("source") not in (NOISE_SECRET, NOISE_SEEDED):
        return f"the ledger's noise provenance is not one privfed writes: {provenance!r}"
    if provenance["source"] == NOISE_SEEDED:
        return (f"the noise derives from the recorded noise_seed={provenance.get('noise_seed')!r}: whoever holds "
                "this ledger regenerates every noise draw, so no ε of it holds against them")
    return None
