"""Partitions among parties and teacher subsets: disjoint, covering, sized, reproducible."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from privfed.pipelines.data.partition import (
    dirichlet_partition,
    homogeneous_partition,
    keyed_teacher_subsets,
    label_mixture_partition,
    split_indices,
    teacher_subsets,
)


def assert_exact_cover(parts: list[np.ndarray], n: int) -> None:
    """Every index in range(n) appears in exactly one part; parts are sorted int arrays."""
    for part in parts:
        assert part.dtype == np.int64
        assert np.all(np.diff(part) > 0)
    combined = np.concatenate(parts)
    assert len(combined) == n
    assert np.array_equal(np.sort(combined), np.arange(n))


@settings(max_examples=60, deadline=None)
@given(
    class_counts=st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=6),
    n_parties=st.integers(min_value=1, max_value=8),
    beta=st.floats(min_value=0.05, max_value=50.0),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_dirichlet_partition_covers_disjointly_with_min_size(class_counts, n_parties, beta, seed):
    y = np.repeat(np.arange(len(class_counts)), class_counts)
    if y.size == 0:
        return
    parts = dirichlet_partition(y, n_parties, beta, min_size=0, random_state=seed)
    assert len(parts) == n_parties
    assert_exact_cover(parts, y.size)
    min_size = min(2, y.size // n_parties)
    try:
        parts = dirichlet_partition(y, n_parties, beta, min_size=min_size, max_draws=200, random_state=seed)
    except ValueError as error:
        # With few examples some settings never meet min_size; that must be the only failure.
        assert "max_draws" in str(error)
        return
    assert_exact_cover(parts, y.size)
    assert min(len(part) for part in parts) >= min_size


@pytest.mark.parametrize("seed", range(5))
def test_dirichlet_partition_meets_min_size_in_the_papers_setting(seed):
    # Two classes, 50 parties, beta = 0.5, at least 10 rows each: FedKT's Adult setting, shrunk.
    y = np.repeat([0, 1], [18000, 6000])
    parts = dirichlet_partition(y, 50, 0.5, min_size=10, random_state=seed)
    assert_exact_cover(parts, y.size)
    assert min(len(part) for part in parts) >= 10


def test_dirichlet_partition_is_deterministic_for_a_seed():
    y = np.random.default_rng(1).integers(0, 4, size=500)
    first = dirichlet_partition(y, 7, 0.5, random_state=123)
    second = dirichlet_partition(y, 7, 0.5, random_state=123)
    other = dirichlet_partition(y, 7, 0.5, random_state=124)
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_dirichlet_partition_accepts_arbitrary_labels():
    y = np.array(["cat", "dog", "emu"] * 40)
    parts = dirichlet_partition(y, 3, 1.0, min_size=5, random_state=0)
    assert_exact_cover(parts, y.size)


def test_small_beta_skews_labels_and_large_beta_does_not():
    y = np.repeat(np.arange(10), 300)

    def mean_classes_per_party(beta: float) -> float:
        parts = dirichlet_partition(y, 10, beta, min_size=10, random_state=0)
        # classes holding at least 5 % of the party's data
        return float(np.mean([np.sum(np.bincount(y[p], minlength=10) >= 0.05 * len(p)) for p in parts]))

    assert mean_classes_per_party(0.1) < 4
    assert mean_classes_per_party(1000.0) == 10


def test_size_cap_keeps_parties_closer_in_size():
    # The balancing rule of the reference code bounds how far parties drift above n/n_parties.
    y = np.repeat(np.arange(10), 500)
    spreads = {}
    for cap in (True, False):
        sizes = [
            max(len(p) for p in dirichlet_partition(y, 20, 0.5, min_size=0, cap_party_size=cap, random_state=seed))
            for seed in range(20)
        ]
        spreads[cap] = np.mean(sizes)
    assert spreads[True] < spreads[False]


def test_dirichlet_partition_reports_impossible_min_size():
    y = np.zeros(50, dtype=int)
    with pytest.raises(ValueError, match="min_size=10 is impossible"):
        dirichlet_partition(y, 6, 0.5, min_size=10)


def test_dirichlet_partition_gives_up_after_max_draws():
    # One class, 40 parties and tiny beta: nearly all mass goes to one party, so 10 each is never met.
    y = np.zeros(400, dtype=int)
    with pytest.raises(ValueError, match="max_draws=5"):
        dirichlet_partition(y, 40, 0.001, min_size=10, max_draws=5, random_state=0)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_parties": 0}, ValueError, "n_parties"),
        ({"n_parties": 2.5}, TypeError, "n_parties"),
        ({"beta": 0.0}, ValueError, "beta"),
        ({"beta": float("inf")}, ValueError, "beta"),
        ({"min_size": -1}, ValueError, "min_size"),
        ({"max_draws": 0}, ValueError, "max_draws"),
        ({"y": np.zeros((3, 2))}, ValueError, "1-D"),
        ({"y": np.array([])}, ValueError, "empty"),
        ({"random_state": -3}, ValueError, "random_state"),
        ({"random_state": "seed"}, TypeError, "random_state"),
    ],
)
def test_dirichlet_partition_validates_arguments(kwargs, error, match):
    arguments = {"y": np.zeros(100, dtype=int), "n_parties": 2, "beta": 0.5, "min_size": 1} | kwargs
    with pytest.raises(error, match=match):
        dirichlet_partition(**arguments)


@settings(max_examples=60, deadline=None)
@given(
    class_counts=st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=6),
    n_parties=st.integers(min_value=1, max_value=8),
    alpha=st.floats(min_value=0.05, max_value=50.0),
    size_fraction=st.floats(min_value=0.0, max_value=1.0),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_label_mixture_partition_covers_disjointly(class_counts, n_parties, alpha, size_fraction, seed):
    y = np.repeat(np.arange(len(class_counts)), class_counts)
    if y.size < n_parties:
        return
    largest = y.size // max(n_parties - 1, 1)
    party_size = max(1, round(size_fraction * largest))
    parts = label_mixture_partition(y, n_parties, alpha, party_size=party_size, random_state=seed)
    assert len(parts) == n_parties
    assert all(len(part) <= party_size for part in parts[:-1])
    assert_exact_cover(parts, y.size)


def test_label_mixture_parties_hold_exactly_the_requested_size_while_the_pools_last():
    # 10 classes and 5 examples per party: with a large alpha every class's share is near half an example, the
    # case where putting the rounding error on the largest count (the authors' code) asks for a negative count
    # (about 5 % of parties at alpha = 1000).
    y = np.repeat(np.arange(10), 1000)
    for alpha in (0.05, 1.0, 1000.0):
        parts = label_mixture_partition(y, 200, alpha, party_size=5, random_state=0)
        assert [len(part) for part in parts[:-1]] == [5] * 199
        assert len(parts[-1]) == y.size - 199 * 5
        assert_exact_cover(parts, y.size)


def test_label_mixture_partition_defaults_to_equal_sizes_and_gives_the_last_party_the_rest():
    # MNIST-like: 10 balanced classes, 80 parties of 600 (the PrivateKT authors' split). With alpha = 0.5 some
    # classes run dry, so late parties may hold fewer and the last party holds what is left.
    y = np.repeat(np.arange(10), 4800)
    parts = label_mixture_partition(y, 80, 0.5, random_state=3)
    sizes = np.array([len(part) for part in parts])
    assert_exact_cover(parts, y.size)
    assert sizes[:-1].max() == 600
    assert np.median(sizes[:-1]) == 600
    assert sizes[-1] == y.size - sizes[:-1].sum()


def test_small_alpha_skews_each_partys_label_mix_and_large_alpha_does_not():
    y = np.repeat(np.arange(10), 3000)

    def mean_classes_per_party(alpha: float) -> float:
        parts = label_mixture_partition(y, 20, alpha, party_size=500, random_state=0)
        return float(np.mean([np.sum(np.bincount(y[p], minlength=10) >= 0.05 * len(p)) for p in parts[:-1]]))

    assert mean_classes_per_party(0.1) < 4
    assert mean_classes_per_party(1000.0) == 10


def test_label_mixture_partition_is_deterministic_for_a_seed_and_accepts_any_labels():
    y = np.array(["cat", "dog", "emu"] * 40)
    first = label_mixture_partition(y, 5, 0.5, random_state=7)
    second = label_mixture_partition(y, 5, 0.5, random_state=7)
    other = label_mixture_partition(y, 5, 0.5, random_state=8)
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))
    assert_exact_cover(first, y.size)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_parties": 0}, ValueError, "n_parties"),
        ({"n_parties": 2.5}, TypeError, "n_parties"),
        ({"alpha": 0.0}, ValueError, "alpha"),
        ({"alpha": float("nan")}, ValueError, "alpha"),
        ({"party_size": 0}, ValueError, "party_size"),
        ({"party_size": 101}, ValueError, "party_size=101 is too large"),
        ({"y": np.zeros((3, 2))}, ValueError, "1-D"),
        ({"random_state": "seed"}, TypeError, "random_state"),
    ],
)
def test_label_mixture_partition_validates_arguments(kwargs, error, match):
    arguments = {"y": np.zeros(100, dtype=int), "n_parties": 2, "alpha": 0.5} | kwargs
    with pytest.raises(error, match=match):
        label_mixture_partition(**arguments)


@given(
    n=st.integers(min_value=1, max_value=500),
    n_parties=st.integers(min_value=1, max_value=40),
    seed=st.integers(0, 99),
)
def test_homogeneous_partition_is_balanced_cover(n, n_parties, seed):
    if n_parties > n:
        with pytest.raises(ValueError, match="n_parties"):
            homogeneous_partition(n, n_parties, random_state=seed)
        return
    parts = homogeneous_partition(n, n_parties, random_state=seed)
    assert_exact_cover(parts, n)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_homogeneous_partition_accepts_labels_and_is_deterministic():
    y = np.arange(30) % 3
    assert all(
        np.array_equal(a, b)
        for a, b in zip(homogeneous_partition(y, 4, random_state=5), homogeneous_partition(30, 4, random_state=5))
    )


def test_split_indices_refuses_more_splits_than_items():
    with pytest.raises(ValueError, match="n_splits=6"):
        split_indices(5, 6)


@given(
    n=st.integers(min_value=1, max_value=300),
    n_partitions=st.integers(min_value=1, max_value=4),
    n_teachers=st.integers(min_value=1, max_value=30),
    seed=st.integers(0, 99),
)
def test_teacher_subsets_are_disjoint_within_each_partition(n, n_partitions, n_teachers, seed):
    if n_teachers > n:
        with pytest.raises(ValueError, match=f"{n} examples"):
            teacher_subsets(n, n_partitions=n_partitions, n_teachers=n_teachers, random_state=seed)
        return
    subsets = teacher_subsets(n, n_partitions=n_partitions, n_teachers=n_teachers, random_state=seed)
    assert len(subsets) == n_partitions
    for partition in subsets:
        assert len(partition) == n_teachers
        assert_exact_cover(partition, n)


def test_teacher_subsets_redraw_each_partition():
    subsets = teacher_subsets(200, n_partitions=2, n_teachers=5, random_state=0)
    assert not all(np.array_equal(a, b) for a, b in zip(subsets[0], subsets[1]))
    again = teacher_subsets(200, n_partitions=2, n_teachers=5, random_state=0)
    assert all(np.array_equal(a, b) for p, q in zip(subsets, again) for a, b in zip(p, q))


def test_class_order_decides_which_class_meets_the_size_cap():
    y = np.array([0] * 900 + [1] * 100)
    natural = dirichlet_partition(y, 10, 0.5, min_size=5, random_state=3)
    rarest_first = dirichlet_partition(y, 10, 0.5, min_size=5, class_order=[1, 0], random_state=3)
    assert [len(p) for p in natural] != [len(p) for p in rarest_first]
    assert sorted(np.concatenate(rarest_first).tolist()) == list(range(1000))
    with pytest.raises(ValueError, match="class_order"):
        dirichlet_partition(y, 10, 0.5, class_order=[0, 2])


def test_reference_protocol_deals_the_first_rows_label_last():
    from privfed.pipelines.data.datasets import federated_split, reference_class_order

    rng = np.random.default_rng(0)
    y = (rng.random(2000) < 0.25).astype(int)
    y[0] = 0
    assert reference_class_order(y) == [1, 0] and reference_class_order(np.arange(6) % 3) is None
    X = rng.normal(size=(2000, 3))
    default = federated_split(X, y, n_parties=8, beta=0.5, protocol="reference-code", random_state=1)
    explicit = federated_split(X, y, n_parties=8, beta=0.5, protocol="reference-code", class_order=[1, 0],
                               random_state=1)
    assert all(np.array_equal(a, b) for a, b in zip(default.party_indices, explicit.party_indices))


# --- teacher subsets stable under adding or removing one example ---------------------------------------
def _subset_contents(X, y, subsets):
    """Each teacher's subset as a set of (row bytes, label): positions shift when rows are added, contents do not."""
    return [[{(X[i].tobytes(), int(y[i])) for i in teacher} for teacher in partition] for partition in subsets]


def test_permutation_subsets_reshuffle_when_one_example_is_added():
    """The issue's finding: teacher_subsets on 12 vs 13 rows with the same seed changes every subset."""
    X = np.arange(13 * 2, dtype=float).reshape(13, 2)
    y = np.arange(13) % 2
    small = _subset_contents(X[:12], y[:12], teacher_subsets(12, n_partitions=1, n_teachers=3, random_state=0))
    large = _subset_contents(X, y, teacher_subsets(13, n_partitions=1, n_teachers=3, random_state=0))
    assert sum(a != b for a, b in zip(small[0], large[0])) > 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_keyed_subsets_change_exactly_one_teacher_per_partition_when_one_example_is_added(seed):
    rng = np.random.default_rng(seed)
    X, y = rng.normal(size=(60, 3)), rng.integers(0, 3, size=60)
    where = int(rng.integers(0, 60))
    X_removed, y_removed = np.delete(X, where, axis=0), np.delete(y, where)
    full = _subset_contents(X, y, keyed_teacher_subsets(X, y, n_partitions=3, n_teachers=4, random_state=seed))
    less = _subset_contents(X_removed, y_removed, keyed_teacher_subsets(
        X_removed, y_removed, n_partitions=3, n_teachers=4, random_state=seed))
    added = (X[where].tobytes(), int(y[where]))
    for partition_full, partition_less in zip(full, less):
        changed = [j for j, (a, b) in enumerate(zip(partition_full, partition_less)) if a != b]
        assert len(changed) == 1
        assert partition_full[changed[0]] - partition_less[changed[0]] == {added}
        # Within a partition the subsets are disjoint and cover the party's data.
        assert sum(len(teacher) for teacher in partition_full) == 60


def test_keyed_subsets_depend_on_the_key_and_refuse_bad_input():
    X, y = np.arange(40.0).reshape(20, 2), np.arange(20) % 2
    first = keyed_teacher_subsets(X, y, n_partitions=1, n_teachers=3, random_state=0)
    second = keyed_teacher_subsets(X, y, n_partitions=1, n_teachers=3, random_state=1)
    assert any(not np.array_equal(a, b) for a, b in zip(first[0], second[0]))
    with pytest.raises(ValueError, match="same number"):
        keyed_teacher_subsets(X, y[:5], n_partitions=1, n_teachers=3)
