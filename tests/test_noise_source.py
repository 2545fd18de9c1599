"""The secret noise source: never reproducible from anything recorded, seeded only on request (issue 40)."""

import copy
import pickle

import numpy as np
import pytest
from privfed.accounting import LaplaceNoisyMax, Ledger, NoiseSource
from privfed.accounting.noise_source import check_noise_seed, noise_provenance_problem


def test_two_secret_sources_never_agree():
    a, b = NoiseSource.secret(), NoiseSource.secret()
    assert not np.array_equal(a.generator.integers(0, 2**62, size=8), b.generator.integers(0, 2**62, size=8))


def test_secret_source_cannot_be_pickled_or_copied():
    source = NoiseSource.secret()
    for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="cannot be pickled or copied"):
            attempt(source)


def test_secret_source_is_not_numpy_default_generator():
    # the bit generator is AES counter mode from randomgen, not PCG64 from a seed
    assert type(NoiseSource.secret().generator.bit_generator).__name__ == "AESCounter"


def test_seeded_sources_repeat_and_copies_keep_their_state():
    a, b = NoiseSource.seeded(3), NoiseSource.seeded(3)
    assert np.array_equal(a.generator.normal(size=5), b.generator.normal(size=5))
    copied = pickle.loads(pickle.dumps(a))
    assert np.array_equal(copied.generator.normal(size=5), a.generator.normal(size=5))


def test_children_of_a_secret_source_carry_no_seed_and_of_a_seeded_one_repeat():
    assert NoiseSource.secret().child_seeds(3) == [None, None, None]
    seeds = NoiseSource.seeded(11).child_seeds(4)
    assert seeds == NoiseSource.seeded(11).child_seeds(4) and len(set(seeds)) == 4
    assert all(isinstance(s, int) and 0 <= s < 2**63 for s in seeds)
    assert [s.reproducible for s in NoiseSource.secret().spawn(2)] == [False, False]


def test_provenance_names_the_seed_only_when_seeded():
    assert NoiseSource.secret().provenance()["source"] == "secret"
    assert "noise_seed" not in NoiseSource.secret().provenance()
    assert NoiseSource.seeded(5).provenance() == {**NoiseSource.seeded(5).provenance(), "noise_seed": 5}


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (2**63, ValueError), (1.5, TypeError), (True, TypeError),
                                        ("3", TypeError)])
def test_noise_seed_is_checked_in_one_line(bad, error):
    with pytest.raises(error, match="noise_seed"):
        check_noise_seed(bad)


def _ledger_with(source):
    ledger = Ledger(delta=1e-5)
    ledger.record(LaplaceNoisyMax(np.array([[9, 1], [7, 3]]), 0.05, 1, unit="party"))
    ledger.record_noise_source(source)
    return ledger


def test_a_seeded_ledger_is_infinite_for_every_observer_and_says_why():
    ledger = _ledger_with(NoiseSource.seeded(1))
    for report in ledger.observer_table():
        assert report.epsilon == float("inf")
        assert any("noise_seed=1" in note for note in report.notes)
    assert Ledger.from_json(ledger.to_json()).noise["noise_seed"] == 1


def test_a_secret_ledger_keeps_its_finite_epsilon_and_records_no_state():
    ledger = _ledger_with(NoiseSource.secret())
    assert np.isfinite(ledger.account().epsilon)
    text = ledger.to_json()
    assert '"source": "secret"' in text and "key" not in Ledger.from_json(text).noise
    assert noise_provenance_problem(Ledger.from_json(text).noise) is None


def test_a_ledger_without_noise_provenance_is_a_problem():
    assert "does not record where its noise came from" in noise_provenance_problem(None)
