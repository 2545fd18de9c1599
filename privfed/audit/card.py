"""The model card against the ledger: ``model card`` and ``privacy statement`` (``docs/audit.md#recomputation``).

A card is the human-readable face of a bundle: the whole card must be the rendering of the ledger and
``card.json``, and its privacy statement (the How to DP-fy ML checklist) the one the ledger gives now. A card
written by another privfed version that differs only warns.
"""

from __future__ import annotations

from collections.abc import Mapping

from privfed.accounting.ledger import Ledger
from privfed.accounting.ledger_entry import load_json
from privfed.accounting.ledger_json import installed_privfed_version
from privfed.audit.report import Check
from privfed.bundle.layout import LEDGER_FILE, MODEL_CARD_FILE
from privfed.bundle.model_card import CARD_DATA_FILE, render_model_card
from privfed.bundle.privacy_statement import card_statement, render_privacy_statement

__all__ = ["card_check", "statement_check"]


def card_check(files: Mapping[str, bytes]) -> Check:
    """``MODEL_CARD.md`` against its rendering from the bundle's ledger and ``card.json``."""
    name = "model card"
    if MODEL_CARD_FILE not in files or CARD_DATA_FILE not in files:
        missing = [f for f in (MODEL_CARD_FILE, CARD_DATA_FILE) if f not in files]
        return Check(name, "warn", f"{', '.join(missing)} absent: the card cannot be compared with the ledger",
                     "readers have no human-readable statement of the guarantee, or one privfed cannot check.", "card")
    try:
        card = load_json(files[CARD_DATA_FILE], CARD_DATA_FILE)
    except ValueError as error:  # a duplicate key, invalid JSON: the card shows values nobody can check
        return Check(name, "fail", f"{CARD_DATA_FILE} is unreadable: {str(error).splitlines()[0]}",
                     "the card's numbers come from a file that says two things or nothing checkable: do not trust "
                     "them.", "card")
    try:
        ledger = Ledger.from_json(files[LEDGER_FILE])
        expected = render_model_card(ledger, card=card)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        return Check(name, "warn",
                     f"not compared: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
                     "the ledger or card data failed their own checks above.", "card")
    if files[MODEL_CARD_FILE] == expected.encode():
        return Check(name, "pass", f"{MODEL_CARD_FILE} is exactly the rendering of the ledger and {CARD_DATA_FILE}")
    if ledger.privfed_version != installed_privfed_version():
        return Check(name, "warn", f"{MODEL_CARD_FILE} differs from this privfed's rendering of the ledger (written by "
                     f"privfed {ledger.privfed_version})", "the card may have been edited, or rendered by another "
                     "version: trust the ledger's numbers, not the card's.", "card")
    return Check(name, "fail", f"{MODEL_CARD_FILE} differs from the rendering of the ledger and {CARD_DATA_FILE}: the "
                 "card says something the ledger does not", "the human-readable card was edited after the bundle was "
                 "written: its numbers cannot be trusted.", "card")


def statement_check(files: Mapping[str, bytes]) -> Check | None:
    """The card's privacy statement against the one the ledger gives now (None when there is no card)."""
    if MODEL_CARD_FILE not in files:
        return None
    name, meaning = "privacy statement", "readers of the card would be told a guarantee the ledger does not give."
    try:
        stated = card_statement(files[MODEL_CARD_FILE].decode("utf-8"))
        ledger = Ledger.from_json(files[LEDGER_FILE])
        expected = render_privacy_statement(ledger)
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as error:
        return Check(name, "warn", f"not compared: {str(error).splitlines()[0] if str(error) else type(error)}",
                     "the ledger or card failed their own checks above.", "card")
    if stated is None:
        return Check(name, "warn", f"{MODEL_CARD_FILE} has no privacy statement (written by privfed "
                     f"{ledger.privfed_version})", "readers have no standard statement of the guarantee.", "card")
    if stated.rstrip() == expected.rstrip():
        return Check(name, "pass", "the card's privacy statement (How to DP-fy ML checklist) matches the ledger: "
                     "unit, relation, ε and δ, accounting, what is not covered")
    if ledger.privfed_version != installed_privfed_version():
        return Check(name, "warn", f"the privacy statement in {MODEL_CARD_FILE} differs from this privfed's (the "
                     f"ledger was written by privfed {ledger.privfed_version})", meaning, "card")
    return Check(name, "fail", f"the privacy statement in {MODEL_CARD_FILE} differs from the one the ledger gives",
                 meaning, "card")
