"""Partitioning data among parties, and a party's data among teachers.

Two ways to share a training set among ``n_parties`` parties, both returning one
sorted ``int64`` index array per party (disjoint, together covering every example):

* :func:`homogeneous_partition` — a uniformly random split into near-equal parts
  (IID parties).
* :func:`dirichlet_partition` — the label-skewed split used by FedKT (Li, He, Song,
  IJCAI 2021, Sec. 5) and FedDF (Lin et al., NeurIPS 2020), following Hsu et al.
  (2019): for each class ``c`` a vector of party shares ``p_c ~ Dir(β·1_n)`` is
  drawn and the class's examples are dealt out in those proportions. Small ``β``
  gives parties few classes; large ``β`` approaches the homogeneous split.
* :func:`label_mixture_partition` — the other common label skew, used by the
  PrivateKT authors' code (Qi et al., 2023): each party draws its own class
  mixture ``q ~ Dir(α·1_C)`` and takes ``q·party_size`` (rounded) examples of each
  class; the last party takes every example left.

And one way to split a single party's data for PATE-style teachers:

* :func:`split_indices` — a random split of ``range(n)`` into disjoint near-equal parts.
* :func:`teacher_subsets` — FedKT Algorithm 1, lines 3-5: for each of the ``s``
  partitions the party's whole data set is divided afresh into ``t`` disjoint
  subsets, one per teacher. Subsets are disjoint within a partition; different
  partitions are independent divisions of the same data.
* :func:`keyed_teacher_subsets` — the same division made stable under adding or
  removing one example: each example goes to the teacher named by a keyed hash
  of its own contents, so one added example changes exactly one teacher's subset
  per partition (what FedKT-L2's example-level k = 1 assumes under add/remove).
"""

from __future__ import annotations

import hashlib
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...accounting._checks import check_int_at_least, check_positive_finite
from ..protocol.seeds import RandomState, as_generator

__all__ = [
    "dirichlet_partition",
    "homogeneous_partition",
    "keyed_teacher_subsets",
    "label_mixture_partition",
    "split_indices",
    "teacher_subsets",
]


def _check_labels(y: object) -> np.ndarray:
    labels = np.asarray(y)
    if labels.ndim != 1:
        raise ValueError(f"y must be a 1-D array of class labels, got shape {labels.shape}")
    if labels.size == 0:
        raise ValueError("y must hold at least one label, got an empty array")
    return labels


def _n_samples(n_samples_or_y: object) -> int:
    if isinstance(n_samples_or_y, numbers.Integral) and not isinstance(n_samples_or_y, bool):
        return check_int_at_least("n_samples", n_samples_or_y, 1)
    return _check_labels(n_samples_or_y).shape[0]


def homogeneous_partition(
    n_samples_or_y: int | np.ndarray, n_parties: int, *, random_state: RandomState = None
) -> list[np.ndarray]:
    """Split examples uniformly at random into ``n_parties`` near-equal parts.

    Parameters
    ----------
    n_samples_or_y : int or array-like of shape (n_samples,)
        The number of examples, or the labels (only their count is used).
    n_parties : int
        Number of parties, ``1 <= n_parties <= n_samples``.
    random_state : None, int, numpy SeedSequence or Generator
        Seed of the random permutation.

    Returns
    -------
    list of ndarray
        ``n_parties`` sorted ``int64`` index arrays, disjoint and covering
        ``range(n_samples)``; their sizes differ by at most one.

    Examples
    --------
    >>> parts = homogeneous_partition(10, 3, random_state=0)
    >>> [len(p) for p in parts]
    [4, 3, 3]
    """
    n_samples = _n_samples(n_samples_or_y)
    n_parties = check_int_at_least("n_parties", n_parties, 1)
    if n_parties > n_samples:
        raise ValueError(f"n_parties must be <= the number of examples ({n_samples}), got {n_parties}")
    return split_indices(n_samples, n_parties, random_state=random_state)


def dirichlet_partition(
    y: np.ndarray,
    n_parties: int,
    beta: float,
    *,
    min_size: int = 10,
    cap_party_size: bool = True,
    max_draws: int = 1000,
    class_order: Sequence[Any] | None = None,
    random_state: RandomState = None,
) -> list[np.ndarray]:
    """Label-skewed partition: per-class party shares drawn from ``Dir(β)``.

    For each class ``c`` (in ``class_order``, sorted by default) the class's examples are shuffled,
    shares ``p_c ~ Dir(β, ..., β)`` over the ``n_parties`` parties are drawn, and the
    examples are cut at the cumulative shares ``⌊cumsum(p_c)·n_c⌋``. With
    ``cap_party_size`` (the rule in FedKT's and NIID-Bench's reference code) a party
    that already holds at least ``n_samples / n_parties`` examples gets no share of
    the classes dealt after that, and the shares are renormalised; this keeps
    party sizes from drifting far apart. The whole draw is repeated until every
    party holds at least ``min_size`` examples, at most ``max_draws`` times.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Class labels (any sortable values).
    n_parties : int
        Number of parties, >= 1.
    beta : float
        Concentration of the Dirichlet distribution, > 0 (FedKT uses 0.5).
    min_size : int, default=10
        Smallest number of examples any party may hold, >= 0; requires
        ``n_parties * min_size <= n_samples``.
    cap_party_size : bool, default=True
        Apply the reference code's balancing rule described above.
    max_draws : int, default=1000
        How many times the whole partition may be drawn before giving up.
    class_order : sequence, default=None
        The labels in the order their examples are dealt out (default: sorted).
        With the size cap the order matters: the classes dealt last go only to
        parties still below the cap. FedKT's code maps a binary file's first label
        to class 1, so that label is dealt out last (see ``federated_split``).
    random_state : None, int, numpy SeedSequence or Generator
        Seed of all draws.

    Returns
    -------
    list of ndarray
        ``n_parties`` sorted ``int64`` index arrays, disjoint and covering
        ``range(n_samples)``, each of size >= ``min_size``.

    Raises
    ------
    ValueError
        On a bad argument, when ``n_parties * min_size > n_samples``, or when no
        draw out of ``max_draws`` met ``min_size`` (raise ``beta``, lower
        ``min_size`` or use fewer parties).

    Examples
    --------
    >>> y = np.repeat([0, 1, 2], 100)
    >>> parts = dirichlet_partition(y, 4, 0.5, random_state=0)
    >>> sorted(np.concatenate(parts).tolist()) == list(range(300))
    True
    """
    labels = _check_labels(y)
    n_parties = check_int_at_least("n_parties", n_parties, 1)
    beta = check_positive_finite("beta", beta)
    min_size = check_int_at_least("min_size", min_size, 0)
    max_draws = check_int_at_least("max_draws", max_draws, 1)
    if not isinstance(cap_party_size, bool):
        raise TypeError(f"cap_party_size must be a bool, got {cap_party_size!r}")
    n_samples = labels.shape[0]
    if n_parties * min_size > n_samples:
        raise ValueError(
            f"min_size={min_size} is impossible: {n_parties} parties need at least "
            f"{n_parties * min_size} examples, but y holds {n_samples}"
        )
    rng = as_generator(random_state)
    present = np.unique(labels)
    if class_order is None:
        order = present
    else:
        order = np.asarray(list(class_order), dtype=present.dtype)
        if len(order) != len(present) or not np.array_equal(np.sort(order), present):
            raise ValueError(
                f"class_order must list each label of y once, got {list(order)} for labels {list(present)}"
            )
    examples_by_class = [np.flatnonzero(labels == label) for label in order]
    size_cap = n_samples / n_parties
    smallest = 0
    for _ in range(max_draws):
        parties = _draw_dirichlet_once(examples_by_class, n_parties, beta, size_cap if cap_party_size else None, rng)
        smallest = min(len(part) for part in parties)
        if smallest >= min_size:
            return parties
    raise ValueError(
        f"no Dirichlet partition with every party holding >= min_size={min_size} examples was found in "
        f"max_draws={max_draws} draws (n_samples={n_samples}, n_parties={n_parties}, beta={beta}; the last "
        f"draw's smallest party held {smallest}); raise beta, lower min_size or use fewer parties"
    )


def _draw_dirichlet_once(
    examples_by_class: list[np.ndarray],
    n_parties: int,
    beta: float,
    size_cap: float | None,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """One draw of :func:`dirichlet_partition`: each party's sorted indices."""
    parties: list[list[np.ndarray]] = [[] for _ in range(n_parties)]
    sizes = np.zeros(n_parties, dtype=np.int64)
    for examples in examples_by_class:
        examples = rng.permutation(examples)
        shares = rng.dirichlet(np.full(n_parties, beta))
        if size_cap is not None:
            capped = shares * (sizes < size_cap)
            # Before the last class some party is always below the cap; keep the
            # uncapped shares in the degenerate case where every share was zeroed.
            if capped.sum() > 0:
                shares = capped / capped.sum()
        cuts = (np.cumsum(shares) * len(examples)).astype(np.int64)[:-1]
        for party, chunk in enumerate(np.split(examples, cuts)):
            parties[party].append(chunk)
            sizes[party] += len(chunk)
    return [np.sort(np.concatenate(chunks)).astype(np.int64) for chunks in parties]


def label_mixture_partition(
    y: np.ndarray,
    n_parties: int,
    alpha: float,
    *,
    party_size: int | None = None,
    random_state: RandomState = None,
) -> list[np.ndarray]:
    """Label-skewed partition: per-party class mixtures drawn from ``Dir(α)``.

    Each class's examples are shuffled into a pool. Parties ``0 … n_parties − 2``
    in turn draw a class mixture ``q ~ Dir(α, …, α)`` over the ``C`` classes,
    round ``q · party_size`` to whole counts summing to ``party_size`` (largest
    remainders round up; the authors' code instead puts the rounding error on the
    largest count, which can go negative for small sizes) and take that many examples
    from the front of each class's pool — fewer where a pool has run dry, so a
    late party may hold less than ``party_size``. The last party takes every
    example still in the pools. This is the split of the PrivateKT authors'
    code (80 parties of 600 MNIST images, ``α = 0.5``); unlike
    :func:`dirichlet_partition`, which deals each class out over the parties,
    it fixes each party's size and skews its label mix.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Class labels (any sortable values).
    n_parties : int
        Number of parties, >= 1.
    alpha : float
        Concentration of each party's class mixture, > 0.
    party_size : int, default=None
        Examples requested by each party but the last, >= 1; requires
        ``(n_parties − 1) · party_size <= n_samples``. Default:
        ``n_samples // n_parties``.
    random_state : None, int, numpy SeedSequence or Generator
        Seed of all draws.

    Returns
    -------
    list of ndarray
        ``n_parties`` sorted ``int64`` index arrays, disjoint and covering
        ``range(n_samples)``; any may be empty when the pools run dry.

    Examples
    --------
    >>> y = np.repeat([0, 1, 2], 100)
    >>> parts = label_mixture_partition(y, 4, 0.5, random_state=0)
    >>> sorted(np.concatenate(parts).tolist()) == list(range(300))
    True
    """
    labels = _check_labels(y)
    n_parties = check_int_at_least("n_parties", n_parties, 1)
    alpha = check_positive_finite("alpha", alpha)
    n_samples = labels.shape[0]
    if party_size is None:
        party_size = max(1, n_samples // n_parties)
    party_size = check_int_at_least("party_size", party_size, 1)
    if (n_parties - 1) * party_size > n_samples:
        raise ValueError(
            f"party_size={party_size} is too large: {n_parties - 1} parties would request "
            f"{(n_parties - 1) * party_size} examples, but y holds {n_samples}"
        )
    rng = as_generator(random_state)
    pools = [rng.permutation(np.flatnonzero(labels == label)) for label in np.unique(labels)]
    taken = np.zeros(len(pools), dtype=np.int64)
    parties = []
    for _ in range(n_parties - 1):
        counts = _round_to_total(rng.dirichlet(np.full(len(pools), alpha)) * party_size, party_size)
        chunks = [pool[start:start + count] for pool, start, count in zip(pools, taken, counts)]
        taken += counts
        parties.append(np.sort(np.concatenate(chunks)).astype(np.int64))
    rest = [pool[start:] for pool, start in zip(pools, taken)]
    parties.append(np.sort(np.concatenate(rest)).astype(np.int64))
    return parties


def _round_to_total(amounts: np.ndarray, total: int) -> np.ndarray:
    """Whole counts summing to ``total`` from non-negative ``amounts`` summing to it: largest remainders round up."""
    counts = np.floor(amounts).astype(np.int64)
    shortfall = total - int(counts.sum())
    counts[np.argsort(counts - amounts, kind="stable")[:shortfall]] += 1
    return counts


def split_indices(n: int, n_splits: int, *, random_state: RandomState = None) -> list[np.ndarray]:
    """Split ``range(n)`` at random into ``n_splits`` disjoint, near-equal parts.

    Parameters
    ----------
    n : int
        Number of items, >= 1.
    n_splits : int
        Number of parts, ``1 <= n_splits <= n`` (every part is non-empty).
    random_state : None, int, numpy SeedSequence or Generator
        Seed of the random permutation.

    Returns
    -------
    list of ndarray
        ``n_splits`` sorted ``int64`` index arrays whose sizes differ by at most one.
    """
    n = check_int_at_least("n", n, 1)
    n_splits = check_int_at_least("n_splits", n_splits, 1)
    if n_splits > n:
        raise ValueError(f"cannot split {n} items into n_splits={n_splits} non-empty parts; need n_splits <= {n}")
    permutation = as_generator(random_state).permutation(n)
    return [np.sort(part).astype(np.int64) for part in np.array_split(permutation, n_splits)]


def teacher_subsets(
    n: int, *, n_partitions: int, n_teachers: int, random_state: RandomState = None
) -> list[list[np.ndarray]]:
    """Index subsets for a party's teachers, as in FedKT Algorithm 1 (lines 3-5).

    For each of the ``n_partitions`` (s) partitions, ``range(n)`` is permuted afresh
    and divided into ``n_teachers`` (t) disjoint subsets, one per teacher. A change
    to one example therefore touches one teacher per partition (s teachers in all),
    which is what the privacy analysis assumes.

    Parameters
    ----------
    n : int
        Number of examples the party holds, >= ``n_teachers``.
    n_partitions : int
        s, >= 1.
    n_teachers : int
        t, the teachers per partition, ``1 <= t <= n``.
    random_state : None, int, numpy SeedSequence or Generator
        Seed of the permutations.

    Returns
    -------
    list of list of ndarray
        ``result[i][j]`` holds the sorted indices of teacher ``j`` in partition ``i``.

    Raises
    ------
    ValueError
        If the party holds fewer examples than teachers per partition.
    """
    n = check_int_at_least("n", n, 1)
    n_partitions = check_int_at_least("n_partitions", n_partitions, 1)
    n_teachers = check_int_at_least("n_teachers", n_teachers, 1)
    if n_teachers > n:
        raise ValueError(
            f"a party with {n} examples cannot give each of n_teachers={n_teachers} teachers a non-empty, "
            f"disjoint subset; need n_teachers <= {n}"
        )
    rng = as_generator(random_state)
    return [split_indices(n, n_teachers, random_state=rng) for _ in range(n_partitions)]


def _row_key(X: np.ndarray, y: np.ndarray, row: int) -> bytes:
    """The bytes that identify example ``row`` by its contents: its features and label, never its position."""
    features, label = X[row], y[row]
    if isinstance(features, np.ndarray) and features.dtype != object:
        data = np.ascontiguousarray(features).tobytes() + features.dtype.str.encode()
    else:
        data = repr(np.asarray(features, dtype=object).tolist()).encode()
    return data + b"|" + repr(label.item() if isinstance(label, np.generic) else label).encode()


def keyed_teacher_subsets(
    X: object, y: object, *, n_partitions: int, n_teachers: int, random_state: RandomState = None
) -> list[list[np.ndarray]]:
    """Teacher subsets that change in exactly one teacher per partition when one example is added or removed.

    :func:`teacher_subsets` divides a permutation of ``range(n)``: adding or
    removing one example shifts every later position and reshuffles every
    teacher's subset, so "one example changes one teacher per partition" then
    holds only under replace-one. Here each example is assigned by a keyed hash
    of its own contents (its feature row and label, see below), with a secret key
    drawn from ``random_state``:

        teacher_i(x, y) = H_{K,i}(x, y) mod t,   H = 64-bit BLAKE2b keyed with K, salted with partition i.

    The assignment of an example depends only on the key and on that example,
    never on the others, so adding an example puts it in one teacher of each
    partition and leaves every other example where it was; removing one takes
    it out of its teachers only. Contents, not positions, are the stable key:
    a row index shifts when an earlier row is removed. Identical rows share a
    teacher (each copy is still one example: adding a copy changes one subset).
    Subset sizes are multinomial rather than equal, and a teacher may get no
    example on a small party (its subset is then empty).

    Parameters
    ----------
    X : array-like of shape (n, ...)
        The party's features (rows are hashed; numeric rows by their bytes and dtype).
    y : array-like of shape (n,)
        The party's labels.
    n_partitions, n_teachers : int
        s and t, each >= 1.
    random_state : None, int, numpy SeedSequence or Generator
        Seed of the hash key (32 bytes drawn from it).

    Returns
    -------
    list of list of ndarray
        ``result[i][j]``: the sorted row indices of teacher ``j`` in partition ``i``.
    """
    X, y = np.asarray(X), np.asarray(y)
    n_partitions = check_int_at_least("n_partitions", n_partitions, 1)
    n_teachers = check_int_at_least("n_teachers", n_teachers, 1)
    if X.ndim < 1 or y.ndim != 1 or len(X) != len(y) or len(y) == 0:
        raise ValueError(
            f"X and y must hold the same number >= 1 of examples (y 1-D), got shapes {X.shape} and {y.shape}"
        )
    key = as_generator(random_state).bytes(32)
    rows = [_row_key(X, y, row) for row in range(len(y))]
    words = np.array(
        [[int.from_bytes(hashlib.blake2b(data, key=key, salt=partition.to_bytes(16, "little"), digest_size=8).digest(),
                         "little") for partition in range(n_partitions)] for data in rows],
        dtype=np.uint64,
    )
    teachers = (words % np.uint64(n_teachers)).astype(np.int64)
    return [
        [np.flatnonzero(teachers[:, partition] == teacher).astype(np.int64) for teacher in range(n_teachers)]
        for partition in range(n_partitions)
    ]
