"""A claims file's claim against privfed's recomputation of the mechanisms it states.

``claimed ε`` (the claim against privfed's tight and classic ε, per round and over the rounds), ``accountant
floor`` (what the publication's own moments accountant can print) and ``shuffling`` (PrivateKT's local, shuffled
and unshuffled figures): ``docs/audit.md#recomputation`` and, paper by paper, "The four seed papers, audited".
:func:`claims_statement` also reads the claim for the hygiene checks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from privfed.accounting.account import account
from privfed.accounting.mechanism import Mechanism
from privfed.accounting.registry import public_mechanism_from_record
from privfed.accounting.report import PrivacyReport
from privfed.audit.hygiene import Release, Statement, parse_protected_units, resolve_protected_units
from privfed.audit.recomputation import RTOL
from privfed.audit.report import RECOMPUTE_MEANING, AuditInputError, Check, format_epsilon

__all__ = ["claims_statement"]


#: The parameter that counts a mechanism's own repetitions: scaled for a per-round claim instead of copying it.
_REPETITIONS = {"randomized_response": "reports", "dpsgd": "steps", "quantized_laplace_ensemble": "draws_per_example",
                "shuffled_randomized_response": "reports"}


def _over_rounds(record: Mapping[str, Any], rounds: int) -> dict[str, Any]:
    """``record`` repeated ``rounds`` times, as one record when its kind counts its own repetitions."""
    counter = _REPETITIONS.get(record.get("kind"))
    parameters = dict(record.get("parameters", {}))
    if counter is None or rounds == 1:
        return dict(record)
    parameters[counter] = int(parameters.get(counter, 1)) * rounds
    return {**record, "parameters": parameters}


def claims_statement(
    document: Mapping[str, Any], given_units: dict[str, int]
) -> tuple[Statement, dict[str, Any], list[Check]]:
    """The claim of a claims file, privfed's recomputation of it, and the recomputation checks."""
    claim = document["claim"]
    unit, delta, epsilon = claim["unit"], float(claim["delta"]), claim.get("epsilon")
    rounds = claim.get("rounds") if claim.get("scope", "total") == "per_round" else None
    mechanisms: dict[str, list[Mechanism]] = {}  # one round (the whole release for a total claim)
    composed: dict[str, list[Mechanism]] = {}  # over every round
    placeholders: set[str] = set()
    releases = []
    for index, record in enumerate(document.get("mechanisms", [])):
        try:
            mechanism, placeholder = public_mechanism_from_record(record)
            repeated = record if rounds is None else _over_rounds(record, rounds)
            over_rounds = [public_mechanism_from_record(repeated)[0]]
            if rounds is not None and repeated is record:  # no count of its own: composed in closed form
                from privfed.accounting.sequential import compose_repeated  # dp-accounting: only for rounds

                over_rounds = [compose_repeated(over_rounds[0], rounds)]
        except (ValueError, TypeError, KeyError) as error:
            raise AuditInputError(f"claims file: mechanisms[{index}] cannot be rebuilt: {error}") from None
        mechanisms.setdefault(mechanism.unit, []).append(mechanism)
        composed.setdefault(mechanism.unit, []).extend(over_rounds)
        if placeholder:
            placeholders.add(mechanism.unit)
        releases.append(Release(mechanism.kind, mechanism.unit, sum(m.num_queries for m in over_rounds),
                                mechanism.data_dependent and not placeholder, mechanism.parameters()))

    def report_for(members: list[Mechanism], member_unit: str, analysis: str) -> PrivacyReport:
        report = account(members, delta=delta, analysis=analysis)
        if member_unit in placeholders:  # only the data-independent part of a placeholder rebuild means anything
            report = dataclasses.replace(report, epsilon=report.epsilon_data_independent, data_dependent=False)
        pure = [member.pure_epsilon() for member in members]
        if all(value is not None for value in pure) and sum(pure) < report.epsilon:
            # Basic composition of pure ε-DP releases holds at δ = 0, hence at any δ (e.g. one randomized response).
            report = dataclasses.replace(report, epsilon=float(sum(pure)), method="pure")
        return report

    reports = {u: report_for(ms, u, "tight") for u, ms in composed.items()}
    headline = reports.get(unit)
    name, section = "claimed ε", "recomputation"
    if headline is None:
        if epsilon is not None:
            check = Check(name, "fail", f"ε = {epsilon:g} is claimed at {unit} level but no {unit}-level mechanism is "
                          "stated: nothing supports the number", RECOMPUTE_MEANING, section)
        else:
            check = Check(name, "warn", f"no ε is claimed and no {unit}-level mechanism is stated: no differential-"
                          "privacy guarantee", "nothing bounds what the model reveals about its training data.",
                          section)
    classic = None if headline is None else report_for(composed[unit], unit, "classic")
    if headline is not None:
        recomputed = (f"privfed: ε = {format_epsilon(headline.epsilon)} (tight, {headline.method.upper()}), "
                      f"{format_epsilon(classic.epsilon)} (classic) at δ = {delta:g}, {unit} level"
                      + (", data-independent (the private votes are not published)" if unit in placeholders else ""))
        if epsilon is None:
            check = Check(name, "warn", f"no ε is claimed; the stated mechanism gives {recomputed}",
                          "the publication states no overall privacy figure; privfed's number is the one to use.",
                          section)
        elif rounds is not None:
            one_round = report_for(mechanisms[unit], unit, "tight")
            status = "pass" if epsilon >= one_round.epsilon * (1 - RTOL) else "fail"
            check = Check(name, status, f"ε = {epsilon:g} per round; one round of the stated mechanism gives "
                          f"ε = {format_epsilon(one_round.epsilon)}; over {rounds} rounds {recomputed}",
                          RECOMPUTE_MEANING if status == "fail" else "", section)
        elif epsilon >= headline.epsilon * (1 - RTOL):
            check = Check(name, "pass", f"ε = {epsilon:g} claimed; {recomputed}")
        else:
            check = Check(name, "fail", f"ε = {epsilon:g} claimed, but the stated mechanism gives {recomputed}: the "
                          "claim is smaller than privfed's bound", RECOMPUTE_MEANING, section)
    fallback = parse_protected_units(document.get("protected_units"))
    counts, source = resolve_protected_units(given_units, unit, fallback, "from the claims file")
    statement = Statement(
        unit=unit, delta=delta, epsilon=None if epsilon is None else float(epsilon), reports=reports,
        releases=tuple(releases), unaccounted=tuple(str(u) for u in document.get("unaccounted", [])),
        setting=document.get("setting", "unknown"), protected_units=counts, protected_units_source=source,
        rounds=rounds, data_dependent_claim=bool(claim.get("data_dependent", False)),
    )
    stated = {"epsilon": epsilon, "delta": delta, "unit": unit, "scope": claim.get("scope", "total"),
              "source": "claims file", "recomputed_epsilon": None if headline is None else headline.epsilon,
              "recomputed_epsilon_classic": None if classic is None else classic.epsilon}
    return statement, stated, [check, *_accountant_check(document, headline),
                               *_shuffling_check(document, rounds, headline)]


def _accountant_check(document: Mapping[str, Any], headline: PrivacyReport | None) -> list[Check]:
    """What the publication's own moments accountant (moments λ = 1 … max_moment) can print for the stated release.

    Its ε = min_λ (α(λ) + ln(1/δ))/λ is never below ln(1/δ)/max_moment, whatever
    the votes; and its data-independent ε for the stated queries is the figure a
    correct claim should not exceed.
    """
    claim = document["claim"]
    moment, epsilon = claim.get("max_moment"), claim.get("epsilon")
    if moment is None or epsilon is None or headline is None:
        return []
    delta = float(claim["delta"])
    floor = math.log(1.0 / delta) / moment
    records = [r for r in document.get("mechanisms", []) if r.get("unit") == claim["unit"]]
    classic = account([public_mechanism_from_record(r)[0] for r in records], delta=delta, analysis="classic",
                      orders=np.arange(2.0, moment + 2.0)).epsilon_data_independent
    implied = _queries_for(records[0], float(epsilon), delta) if len(records) == 1 else None
    detail = (f"the publication's {moment}-moment accountant gives data-independent ε = {format_epsilon(classic)} "
              f"for the stated release and privfed's tight analysis {format_epsilon(headline.epsilon)}")
    if implied is not None:
        detail += f"; ε = {epsilon:g} is what that accountant gives for about {implied} queries"
    if epsilon < floor * (1 - RTOL):
        return [Check("accountant floor", "warn",
                      f"FLAG: ε = {epsilon:g} is below ln(1/δ)/{moment} = {format_epsilon(floor)}, the smallest ε a "
                      f"{moment}-moment accountant can print at δ = {delta:g}: the stated analysis cannot have "
                      "produced it; " + detail,
                      "the number may still be a valid bound (see 'claimed ε'), but it does not come from the analysis "
                      "the publication names.", "recomputation")]
    status = "pass" if epsilon <= classic * (1 + 1e-2) else "warn"
    meaning = "" if status == "pass" else ("the claim is above the publication's own data-independent bound for the "
                                           "stated release: the release it describes was probably larger.")
    return [Check("accountant floor", status, detail, meaning, "recomputation")]


def _queries_for(record: Mapping[str, Any], epsilon: float, delta: float) -> int | None:
    """The number of queries at which ``record``'s classic data-independent ε reaches ``epsilon`` (bisection)."""
    parameters = record.get("parameters", {})
    if "num_queries" not in parameters:
        return None

    def classic(queries: int) -> float:
        changed = {**record, "parameters": {**parameters, "num_queries": queries}}
        return account(
            public_mechanism_from_record(changed)[0], delta=delta, analysis="classic"
        ).epsilon_data_independent

    low, high = 1, 1
    while classic(high) < epsilon:
        low, high = high, high * 2
        if high > 10**7:
            return None
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if classic(middle) < epsilon else (low, middle)
    return low


def _shuffling_check(document: Mapping[str, Any], rounds: int | None, composed: PrivacyReport | None) -> list[Check]:
    """PrivateKT's three figures: the per-round LDP claim, a trusted shuffler's central ε, and ε without one.

    Only for a per-round claim of randomized response that states ``clients_per_round``.
    """
    claim = document["claim"]
    clients = claim.get("clients_per_round")  # checked by load_claims
    responses = [r for r in document.get("mechanisms", []) if r.get("kind") == "randomized_response"]
    if clients is None or rounds is None or len(responses) != 1 or composed is None:
        return []
    from privfed.accounting._dp_accounting import MAX_PLD_COMPOSITIONS  # dp-accounting: only for PrivateKT's claims
    from privfed.accounting.shuffling import ShuffledRandomizedResponse

    local, _ = public_mechanism_from_record(responses[0])
    delta = float(claim["delta"])
    one_round = ShuffledRandomizedResponse(local.epsilon_per_report, num_users=int(clients),
                                           num_classes=local.num_classes, unit=local.unit)
    if rounds <= MAX_PLD_COMPOSITIONS:
        shuffled = ShuffledRandomizedResponse(local.epsilon_per_report, num_users=int(clients),
                                              num_classes=local.num_classes, reports=rounds, unit=local.unit)
        over_rounds = f"{format_epsilon(min(shuffled.central_epsilon(delta), composed.epsilon))} over {rounds} rounds"
    else:  # the rounds' PLD has no closed form: bounded work
        over_rounds = (f"not computed over {rounds} rounds (more than {MAX_PLD_COMPOSITIONS} self-compositions; "
                       f"at most {format_epsilon(composed.epsilon)}, the unshuffled figure)")
    detail = (f"(1) claim: ε₀ = {format_epsilon(local.epsilon_per_report)} per round, local DP of each client's "
              "report; "
              f"(2) with a trusted shuffler of the {clients} clients' reports per round (Feldman–McMillan–Talwar "
              f"numerical bound; never above the unshuffled figure, of which it is post-processing): central "
              f"ε = {format_epsilon(min(one_round.central_epsilon(delta), local.pure_epsilon()))} per round, "
              f"{over_rounds}; "
              "(3) without one — neither the authors' "
              f"code nor privfed has a shuffler — ε = {format_epsilon(composed.epsilon)} over {rounds} rounds")
    return [Check("shuffling", "warn", detail,
                  "the paper's argument that the loss does not accumulate rests on model shuffling; only a trusted "
                  "shuffler gives the central figure, and it still composes over rounds.", "recomputation")]
