"""Check a privfed evidence pack without privfed: ``python verify.py [--public-key KEY.pub]`` inside the pack.

Needs only the Python standard library, numpy, scipy, dp-accounting and (for a signed pack) model-signing::

    pip install dp-accounting model-signing

1. The signature: with ``pack.sig`` present, OpenSSF model signing verifies every other file of the folder
   against it, with ``--public-key`` (default: ``publisher.pub`` in the pack; compare its fingerprint, printed,
   with the one the publisher gave you). Without ``pack.sig`` it prints "unsigned".
2. ``ledger.json`` is the ledger ``deployment_facts.json`` names (sha256).
3. Every data-independent ε of the ledger, per entry and unit, is recomputed with dp-accounting from the event
   ``events.json`` exports for it (dp-accounting's own ``to_named_tuple`` form), by the accountant that gave it:
   the privacy loss distribution (``pld``: built exactly as privfed builds it, on the recorded grid; for a plain
   Gaussian mechanism or a composition of them, the exact closed form of its privacy profile, as privfed
   computes it: :func:`gaussian_epsilon`), the RDP
   accountant on the recorded orders (``rdp``), or basic composition of pure ε-DP (``pure``). One line per
   entry: MATCH (within 1e-9), MISMATCH, or NOT RECOMPUTED with the reason the pack gives.
4. Skellam releases (secure aggregation with distributed Skellam noise: FedKT's vote histograms, FedKD's logit
   levels), for which dp-accounting has no event: the Skellam probability mass function is computed here with
   numpy (:func:`skellam_log_pmf`) and handed to dp-accounting's ``from_two_probability_mass_functions``, exactly
   as privfed builds the PLD (:func:`skellam_shift_pld`); and the closed-form Skellam RDP bound
   (:func:`skellam_rdp`, Agarwal, Kairouz & Liu, NeurIPS 2021) is converted to (ε, δ) by dp-accounting's
   ``compute_epsilon``, as privfed converts every RDP curve, and compared with privfed's number to 1e-9.

Exit status 0 when the signature (if any) verifies, the ledger is the one named and every recomputable ε
matches; 1 otherwise.

This file is privfed's ``privfed/evidence/verify_script.py``, copied into each pack by ``privfed evidence``.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import functools
import hashlib
import json
import logging
import math
import sys
from pathlib import Path

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import optimize, special

#: Largest |recomputed − recorded| / max(1, |recorded|) that counts as a match.
TOLERANCE = 1e-9
#: The dp-accounting event classes a pack may name (nothing else is built from a file).
EVENT_CLASSES = ("GaussianDpEvent", "LaplaceDpEvent", "RandomizedResponseDpEvent", "PoissonSampledDpEvent",
                 "SampledWithoutReplacementDpEvent", "SelfComposedDpEvent", "ComposedDpEvent", "NonPrivateDpEvent",
                 "NoOpDpEvent")
_RELATIONS = {"add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
              "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE}
#: privfed's Skellam leaf as the pack names it (module, class).
SKELLAM_LEAF = ("privfed.accounting.skellam", "SkellamDpEvent")
#: The Skellam PMF's support, in standard deviations beyond the shift (privfed's ``_SUPPORT_DEVIATIONS``).
SKELLAM_SUPPORT_DEVIATIONS = 30.0


@dataclasses.dataclass(frozen=True)
class SkellamDpEvent(dp_accounting.DpEvent):
    """One integer coordinate moved by ``shift`` under Skellam noise of ``variance``: X₁ − X₂ with X₁, X₂ ~
    Poisson(variance/2) (privfed's leaf event; dp-accounting has none). Its PLD: :func:`skellam_shift_pld`."""

    variance: float
    shift: int


def skellam_log_pmf(values: np.ndarray, variance: float) -> np.ndarray:
    """log Pr[X₁ − X₂ = k] for each k of ``values``, X₁, X₂ ~ Poisson(μ = variance/2) independent.

    Pr[X₁ − X₂ = k] = Σ_j Pr[X₁ = j + |k|]·Pr[X₂ = j] (symmetric in k), summed in log space over the j where the
    terms are within e^-800 of the largest (|j − (μ − |k|/2)| ≤ 40√μ + 60 around it; the rest is far below
    float precision). Agrees with scipy's ``skellam.logpmf``, which privfed uses, to ~1e-13 within the support.
    """
    mu = variance / 2.0
    magnitudes = np.abs(np.asarray(values, dtype=np.int64))
    width = math.ceil(40.0 * math.sqrt(mu) + 60.0)
    top = int(magnitudes.max(initial=0)) + math.ceil(mu) + 2 * width + 2
    draws = np.arange(top + 1, dtype=float)
    log_poisson = draws * math.log(mu) - mu - np.array([math.lgamma(j + 1.0) for j in draws])
    out = np.empty(len(magnitudes))
    for index, k in enumerate(magnitudes):
        centre = max(0, int(round(mu - k / 2.0)))
        low, high = max(0, centre - width), min(top - k, centre + width)
        terms = log_poisson[low + k:high + k + 1] + log_poisson[low:high + 1]
        peak = terms.max()
        out[index] = peak + math.log(float(np.exp(terms - peak).sum()))
    return out


@functools.lru_cache(maxsize=64)
def skellam_shift_pld(variance: float, shift: int,
                      interval: float) -> privacy_loss_distribution.PrivacyLossDistribution:
    """The pessimistic PLD of Sk(shift, variance) against Sk(0, variance), as privfed builds it
    (privfed/accounting/skellam.py, ``_shift_pld``): the PMFs on ±(shift + ⌈30σ⌉ + 10), the mass of the shifted
    distribution beyond it at loss +∞, dp-accounting's ``from_two_probability_mass_functions`` (symmetric)."""
    half = shift + math.ceil(SKELLAM_SUPPORT_DEVIATIONS * math.sqrt(variance)) + 10
    support = np.arange(-half, half + shift + 1)
    lower = skellam_log_pmf(support, variance)
    upper = skellam_log_pmf(support - shift, variance)
    reach = max(2000, math.ceil(20 * math.sqrt(variance)))
    beyond = np.concatenate([np.arange(-half - shift - 1 - reach, -half - shift), np.arange(half + 1, half + reach)])
    tail = float(np.exp(skellam_log_pmf(beyond, variance)).sum())
    log_lower = {int(k): float(v) for k, v in zip(support, lower)}
    log_upper: dict = {int(k): float(v) for k, v in zip(support, upper)}
    if tail > 0.0:
        log_upper[None] = math.log(tail)
    return privacy_loss_distribution.from_two_probability_mass_functions(
        log_lower, log_upper, pessimistic_estimate=True, value_discretization_interval=interval, symmetric=True)


def skellam_rdp(orders: list[float], *, variance: float, l1_sensitivity: float, l2_sensitivity: float,
                count: int) -> list[float]:
    """The Skellam mechanism's RDP at each order, ``count`` releases composed (privfed's ``SkellamMechanism.rdp``).

    Agarwal, Kairouz & Liu, "The Skellam Mechanism for Differentially Private Federated Learning", NeurIPS 2021
    (arXiv:2110.04995), §3, the multi-dimensional bound for noise Sk(μ, μ), here with v = 2μ the variance and
    Δ₁, Δ₂ the move's ℓ1 and ℓ2 norms::

        ε(α) ≤ α Δ₂²/(2v) + min( ((2α − 1) Δ₂² + 6 Δ₁)/(4v²),  3 Δ₁/(2v) )

    per release, evaluated at ⌈α⌉ (Rényi divergence is non-decreasing in α), times ``count`` (RDP composition
    adds; Mironov 2017, Prop. 1).
    """
    v, l1, l2 = float(variance), float(l1_sensitivity), float(l2_sensitivity)
    alpha = np.ceil(np.asarray(orders, dtype=float) - 1e-12)
    per_release = alpha * l2**2 / (2 * v) + np.minimum(((2 * alpha - 1) * l2**2 + 6 * l1) / (4 * v**2),
                                                       3 * l1 / (2 * v))
    return [float(r) for r in count * per_release]


def skellam_rdp_epsilon(parameters: dict, delta: float) -> float:
    """ε at ``delta`` of :func:`skellam_rdp` on the recorded orders, by dp-accounting's RDP → (ε, δ) conversion."""
    orders = [float(a) for a in parameters["orders"]]
    rdp = skellam_rdp(orders, variance=parameters["variance"], l1_sensitivity=parameters["l1_sensitivity"],
                      l2_sensitivity=parameters["l2_sensitivity"], count=int(parameters["count"]))
    return float(rdp_privacy_accountant.compute_epsilon(orders, rdp, delta)[0])


def event_from_document(document: object) -> dp_accounting.DpEvent:
    """A dp-accounting event from its ``to_named_tuple`` JSON form (or privfed's Skellam leaf); ValueError for
    anything else."""
    if isinstance(document, dict) and (document.get("module_name"), document.get("class_name")) == SKELLAM_LEAF:
        variance, shift = document.get("variance"), document.get("shift")
        if not (isinstance(variance, (int, float)) and math.isfinite(variance) and variance > 0
                and isinstance(shift, int) and shift >= 1):
            raise ValueError(f"a Skellam leaf needs a finite variance > 0 and an integer shift >= 1: {document}")
        return SkellamDpEvent(float(variance), shift)
    if not isinstance(document, dict) or document.get("class_name") not in EVENT_CLASSES \
            or document.get("module_name") != "dp_accounting.dp_event":
        raise ValueError(f"not a dp-accounting event this script reads: {str(document)[:120]}")
    fields = {}
    for key, value in document.items():
        if key in ("module_name", "class_name"):
            continue
        if isinstance(value, dict):
            value = event_from_document(value)
        elif isinstance(value, list):
            value = [event_from_document(item) for item in value]
        fields[key] = value
    return getattr(dp_accounting.dp_event, document["class_name"])(**fields)


def merged_gaussians(events: list) -> list:
    """Two or more Gaussian members (once or self-composed) as one Gaussian of multiplier (Σ countᵢ/zᵢ²)^(−1/2), where
    the first stood: their exact composition (privfed/accounting/_dp_accounting.py, merged_gaussians)."""
    def uses(event):
        if isinstance(event, dp_accounting.GaussianDpEvent):
            return float(event.noise_multiplier), 1
        if isinstance(event, dp_accounting.SelfComposedDpEvent) and isinstance(event.event,
                                                                              dp_accounting.GaussianDpEvent):
            return float(event.event.noise_multiplier), int(event.count)
        return None
    found = [uses(event) for event in events]
    gaussian = [item for item in found if item is not None]
    if len(gaussian) < 2 or not all(0.0 < z < math.inf and count >= 1 for z, count in gaussian):
        return list(events)
    merged = dp_accounting.GaussianDpEvent(noise_multiplier=math.fsum(count / (z * z) for z, count in gaussian) ** -0.5)
    first = next(index for index, item in enumerate(found) if item is not None)
    return [merged if index == first else event for index, (event, item) in enumerate(zip(events, found))
            if item is None or index == first]


def gaussian_mu(event: dp_accounting.DpEvent) -> float | None:
    """μ of a plain Gaussian event (Gaussians, self-composed and composed: √(Σ countᵢ/zᵢ²)), ``None`` otherwise
    (privfed/accounting/_dp_accounting.py, gaussian_mu)."""
    def squared(leaf: dp_accounting.DpEvent) -> float | None:
        if isinstance(leaf, dp_accounting.GaussianDpEvent):
            z = float(leaf.noise_multiplier)
            return 1.0 / (z * z) if 0.0 < z < math.inf else None
        if isinstance(leaf, dp_accounting.SelfComposedDpEvent):
            inner = squared(leaf.event)
            return None if inner is None or int(leaf.count) < 1 else int(leaf.count) * inner
        if isinstance(leaf, dp_accounting.ComposedDpEvent) and leaf.events:
            members = [squared(member) for member in leaf.events]
            return None if any(member is None for member in members) else math.fsum(members)  # type: ignore
        return None
    total = squared(event)
    return None if total is None else math.sqrt(total)


def _gaussian_log_delta_upper(mu: float, epsilon: float) -> float:
    """log of δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) rounded up, each term's log moved 8 ulps towards a larger
    δ (privfed/accounting/gaussian_profile.py, _log_delta_upper)."""
    first = float(special.log_ndtr(-epsilon / mu + mu / 2.0))
    second = epsilon + float(special.log_ndtr(-epsilon / mu - mu / 2.0))
    first_up = first + 8.0 * 2.0 ** -53 * abs(first)
    second_down = second - 8.0 * 2.0 ** -53 * (abs(second) + 2.0 * epsilon)
    if second_down >= first_up:
        return min(first_up, 0.0)
    return min(first_up + math.log(-math.expm1(second_down - first_up)), 0.0)


def _gaussian_delta_upper(mu: float, epsilon: float) -> float:
    return min(float(np.nextafter(math.exp(_gaussian_log_delta_upper(mu, epsilon)), math.inf)), 1.0)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The certified ε at ``delta`` of a μ-GDP mechanism, 0 < μ < ∞ (privfed/accounting/gaussian_profile.py,
    gaussian_epsilon): Brent's root of the rounded-up log δ(ε) = log δ, stepped up until δ(ε) ≤ δ holds."""
    target = math.log(delta)

    def excess(epsilon: float) -> float:
        return _gaussian_log_delta_upper(mu, epsilon) - target

    if _gaussian_delta_upper(mu, 0.0) <= delta:
        return 0.0
    high = mu * mu / 2.0 + mu * max(-float(special.ndtri(delta)), 0.0)
    step = max(high, 1e-300)
    while _gaussian_delta_upper(mu, high) > delta:
        high, step = high + step, 2.0 * step
    epsilon = 0.0
    if excess(0.0) > 0.0 >= excess(high):
        epsilon = float(optimize.brentq(excess, 0.0, high, xtol=1e-300, rtol=4.0 * np.finfo(float).eps))
    step = 1e-12 * (epsilon if epsilon > 0.0 else high)
    while _gaussian_delta_upper(mu, epsilon) > delta:
        epsilon, step = min(epsilon + step, high), 2.0 * step
    return epsilon


def event_pld(event: dp_accounting.DpEvent, interval: float) -> privacy_loss_distribution.PrivacyLossDistribution:
    """The pessimistic PLD of ``event`` as privfed builds it (privfed/accounting/_dp_accounting.py, event_pld)."""
    if isinstance(event, SkellamDpEvent):
        return skellam_shift_pld(event.variance, event.shift, interval)
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        if isinstance(event.event, dp_accounting.GaussianDpEvent):
            return privacy_loss_distribution.from_gaussian_mechanism(
                standard_deviation=event.event.noise_multiplier / math.sqrt(event.count),
                value_discretization_interval=interval)
        return event_pld(event.event, interval).self_compose(event.count)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        composed = privacy_loss_distribution.identity(value_discretization_interval=interval)
        for member in merged_gaussians(event.events):
            composed = composed.compose(event_pld(member, interval))
        return composed
    if isinstance(event, dp_accounting.RandomizedResponseDpEvent):
        return privacy_loss_distribution.from_randomized_response(
            noise_parameter=event.noise_parameter, num_buckets=event.num_buckets,
            value_discretization_interval=interval,
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return privacy_loss_distribution.from_gaussian_mechanism(
            standard_deviation=event.noise_multiplier, value_discretization_interval=interval)
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return privacy_loss_distribution.from_laplace_mechanism(
            parameter=event.noise_multiplier, value_discretization_interval=interval)
    if isinstance(event, dp_accounting.PoissonSampledDpEvent) and isinstance(event.event,
                                                                            dp_accounting.GaussianDpEvent):
        return privacy_loss_distribution.from_gaussian_mechanism(
            standard_deviation=event.event.noise_multiplier, sampling_prob=event.sampling_probability,
            value_discretization_interval=interval,
            neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    raise ValueError(f"no privacy loss distribution for {type(event).__name__}")


def pure_epsilon(event: dp_accounting.DpEvent) -> float:
    """Basic composition of pure ε-DP: Laplace 1/b per use, randomized response ln(1 + (1 − p)·C/p)."""
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return event.count * pure_epsilon(event.event)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return sum(pure_epsilon(member) for member in event.events)
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return 1.0 / event.noise_multiplier
    if isinstance(event, dp_accounting.RandomizedResponseDpEvent):
        p = event.noise_parameter
        return math.log1p((1.0 - p) * event.num_buckets / p)
    raise ValueError(f"no pure ε for {type(event).__name__}")


def recompute(row: dict) -> float:
    """The entry's ε from its event, by the accountant the pack names."""
    delta = float(row["delta"])
    if row["method"] == "rdp" and row.get("skellam_rdp") is not None:
        return skellam_rdp_epsilon(row["skellam_rdp"], delta)
    event = event_from_document(row["event"])
    if row["method"] == "pld":
        mu = gaussian_mu(event)
        if mu is not None:
            return gaussian_epsilon(mu, delta)
        return float(event_pld(event, float(row["pld_interval"])).get_epsilon_for_delta(delta))
    if row["method"] == "pure":
        return pure_epsilon(event)
    accountant = rdp_privacy_accountant.RdpAccountant(orders=[float(a) for a in row["orders"]],
                                                      neighboring_relation=_RELATIONS[row["relation"]])
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))


def skellam_bound_problem(row: dict, recorded: float) -> str:
    """For a Skellam entry: "" when the closed-form RDP bound's ε matches privfed's to 1e-9 and the entry's ε is
    no larger than it (the tight ε is the smaller of the PLD's and the RDP's); else what is wrong."""
    parameters = row.get("skellam_rdp")
    if parameters is None:
        return ""
    claimed = float(parameters["epsilon"])
    value = skellam_rdp_epsilon(parameters, float(row["delta"]))
    if abs(value - claimed) > TOLERANCE * max(1.0, abs(claimed)):
        return f"Skellam RDP bound: privfed's ε = {claimed!r}, recomputed {value!r}"
    if recorded > value * (1.0 + TOLERANCE):
        return f"the entry's ε = {recorded!r} exceeds its Skellam RDP bound {value!r}"
    return ""


def fingerprint(public_key: Path) -> str:
    """sha256 of the key's DER (SubjectPublicKeyInfo), as privfed keygen prints it."""
    body = "".join(line for line in public_key.read_text().splitlines() if line and not line.startswith("-----"))
    return hashlib.sha256(base64.b64decode(body)).hexdigest()


def check_signature(folder: Path, public_key: Path | None) -> bool:
    signature = folder / "pack.sig"
    if not signature.is_file():
        print("signature: unsigned (no pack.sig): the files' integrity rests on how you received them")
        return True
    key = public_key or folder / "publisher.pub"
    from model_signing import verifying

    try:
        verifying.Config().use_elliptic_key_verifier(public_key=key).verify(folder, signature)
    except Exception as error:  # noqa: BLE001 - model-signing raises several error types
        print(f"signature: INVALID ({str(error).splitlines()[0] if str(error) else type(error).__name__})")
        return False
    origin = "" if public_key else " (the key shipped in the pack: compare the fingerprint with the publisher's)"
    print(f"signature: valid, every file verified (OpenSSF model signing; key {key.name}, fingerprint "
          f"{fingerprint(key)}{origin})")
    return True


def main(argv: list[str] | None = None) -> int:
    # dp-accounting logs one line per fractional Rényi order whose series does not converge; that order is then
    # left out of the minimum (the ε stays valid, and the pack's ε was computed the same way).
    logging.getLogger("absl").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description="Check a privfed evidence pack with dp-accounting and model-signing.")
    parser.add_argument("--public-key", type=Path, help="the publisher's public key (PEM); default publisher.pub")
    parser.add_argument("--folder", type=Path, default=Path(__file__).resolve().parent, help="the pack folder")
    args = parser.parse_args(argv)
    folder = args.folder
    ok = check_signature(folder, args.public_key)
    facts = json.loads((folder / "deployment_facts.json").read_text(encoding="utf-8"))
    ledger_sha256 = hashlib.sha256((folder / "ledger.json").read_bytes()).hexdigest()
    named = facts["tier1"]["ledger_sha256"]
    print(f"ledger.json: {'matches' if ledger_sha256 == named else 'DOES NOT MATCH'} the sha256 the statement names")
    ok &= ledger_sha256 == named
    rows = json.loads((folder / "events.json").read_text(encoding="utf-8"))["entries"]
    matched, skipped, unaccounted = 0, 0, 0
    for row in rows:
        where = f"entry {row['entry']} ({row['unit'] or 'no unit'}, {row['description']})"
        if not row["recomputable"]:
            unaccounted += row["kind"] == "unaccounted"
            skipped += row["kind"] != "unaccounted"
            print(f"{where}: NOT RECOMPUTED: {row['reason']}")
            continue
        recorded = float(row["epsilon"])
        try:
            value = recompute(row)
            bound_problem = skellam_bound_problem(row, recorded)
        except (ValueError, KeyError, TypeError) as error:
            print(f"{where}: MISMATCH: could not recompute ({error})")
            ok = False
            continue
        if bound_problem:
            ok = False
            print(f"{where}: MISMATCH: {bound_problem}")
        elif abs(value - recorded) <= TOLERANCE * max(1.0, abs(recorded)):
            matched += 1
            also = " and its Skellam RDP bound" if row.get("skellam_rdp") is not None else ""
            print(f"{where}: MATCH ε = {value!r} ({row['method']}, δ = {row['delta']:g}){also}")
        else:
            ok = False
            print(f"{where}: MISMATCH: recorded ε = {recorded!r}, recomputed {value!r} ({row['method']})")
    accounted = len(rows) - unaccounted
    share = 100.0 * matched / accounted if accounted else 100.0
    print(f"{matched} of {accounted} accounted entries recomputed to {TOLERANCE:g} ({share:.1f} %); {skipped} not "
          f"recomputable with dp-accounting alone, {unaccounted} unaccounted (ε = ∞, nothing to recompute): named "
          "above")
    print("verdict:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
