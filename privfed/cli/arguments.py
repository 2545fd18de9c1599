"""The command line's conventions: exit codes and argument types (output folders: :mod:`privfed.output_folder`).

Every ``privfed`` subcommand checks all its arguments and output paths before it
starts any work, and answers a mistake with one line on stderr and exit code 2.
Only the standard library is imported here, so that ``privfed --help`` is instant.

Exit codes (``docs/cli.md``):

====  ==========================================================================
0     success
1     a check failed (``privfed audit``)
2     bad input: an argument, a path or a file's content (one line, no traceback)
3     finished, but some runs failed (``privfed report``; one line per distinct failure)
130   interrupted (Ctrl-C); ``privfed report`` resumes when rerun
====  ==========================================================================
"""

from __future__ import annotations

import argparse
import math

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CHECK_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_RUNS_FAILED",
    "MAX_EPSILON_PER_ANSWER",
    "Parser",
    "check_gamma",
    "integer_at_least",
    "max_gamma",
    "number_in",
]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_RUNS_FAILED = 3
EXIT_INTERRUPTED = 130

#: The largest pure ε of one noisy-max answer privfed accounts: ``privfed.accounting.documents.MAX_EPSILON_PER_ANSWER``,
#: repeated here so that building the parser imports nothing heavy (a test keeps the two equal).
MAX_EPSILON_PER_ANSWER = 700.0


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit code 2), pointing at ``--help``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("unrecognized arguments: "):
            message += _did_you_mean(message.split(": ", 1)[1].split(), self._option_strings())
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _option_strings(self) -> list[str]:
        """Every flag of this parser and of its subcommands, recursively."""
        options = []
        for action in self._actions:
            options += [option for option in action.option_strings if option.startswith("--")]
            if isinstance(action, argparse._SubParsersAction):
                for parser in action.choices.values():
                    options += parser._option_strings() if isinstance(parser, Parser) else []
        return sorted(set(options))


def _did_you_mean(words: list[str], options: list[str]) -> str:
    """"; did you mean '--gamma'?" for the first unknown flag close to a known one, else ""."""
    import difflib

    for word in words:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1)
            if close:
                return f"; did you mean {close[0]!r}?"
    return ""


def number_in(low: float, high: float, *, low_open: bool = True, high_open: bool = False):
    """An argparse type: a finite float in the interval (low, high], brackets as given."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number in {interval}, got {text!r}") from None
        inside = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
        if not (math.isfinite(value) and inside):
            raise argparse.ArgumentTypeError(f"must be a number in {interval}, got {text}")
        return value

    parse.__name__ = f"number in {interval}"
    return parse


def integer_at_least(minimum: int):
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def max_gamma(votes_per_unit: int) -> float:
    """The largest Laplace γ privfed accounts with ``votes_per_unit`` = k: one answer's pure ε, 2kγ, is at most 709."""
    return MAX_EPSILON_PER_ANSWER / (2 * votes_per_unit)


def check_gamma(gamma: float, votes_per_unit: int, *, argument: str = "--gamma") -> None:
    """Refuse a γ whose per-answer ε 2kγ would overflow the accounting, naming the valid range."""
    if gamma > max_gamma(votes_per_unit):
        raise ValueError(
            f"{argument} must be in (0, {max_gamma(votes_per_unit):g}] with votes per unit k = {votes_per_unit}: "
            f"the ε of one answer, 2·k·γ, must be at most {MAX_EPSILON_PER_ANSWER:g} (exp(ε) overflows a float "
            f"beyond it); got {gamma:g}"
        )
