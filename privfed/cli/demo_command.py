"""``privfed demo``: FedKT-L1 on scikit-learn's digits, end to end, written as a bundle.

Twenty hospitals-in-miniature each hold a non-IID share of the 8×8 digits
(Dirichlet β = 1); a public unlabeled set of 500 images is shared. FedKT trains
teachers and students inside each party, the server labels 100 public queries
by consistent voting with Laplace noise (privacy level L1), and the final model
is published with its privacy ledger. SOLO (each party alone) and FedKT-L0 (no
noise) are trained on the same split for context.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from privfed.cli.arguments import EXIT_OK, check_gamma, integer_at_least, number_in
from privfed.output_folder import check_output_folder

__all__ = ["add_demo_command", "run_demo"]

#: Public images of the demo's split; ``--query-fraction`` must ask for at least one of them.
PUBLIC_SIZE = 500


def run_demo(out: Path, *, gamma: float = 0.5, query_fraction: float = 0.2, seed: int = 0, overwrite: bool = False,
             progress: bool | None = None) -> dict[str, Any]:
    """Run the demo; write the FedKT-L1 bundle to ``out``; return the figures it prints.

    ``progress``: bars over the three trainings and their parties (``None``: on a terminal only).
    """
    from sklearn.datasets import load_digits
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.tree import DecisionTreeClassifier

    from privfed.bundle.save import save_bundle
    from privfed.pipelines import federated_split
    from privfed.pipelines.fedkt.estimator import FedKT, Solo
    from privfed.pipelines.protocol.progress import progress_bar

    X, y = load_digits(return_X_y=True)
    split = federated_split(X, y, n_parties=20, beta=1.0, public_size=PUBLIC_SIZE, test_size=297, min_size=20,
                            random_state=seed)
    teacher = RandomForestClassifier(n_estimators=20, max_depth=8)
    student = RandomForestClassifier(n_estimators=50)
    settings = dict(n_partitions=1, n_teachers=2, random_state=seed, progress=progress)

    start = time.perf_counter()
    with progress_bar(total=3, progress=progress, desc="privfed demo", unit="model") as bar:
        solo = Solo(DecisionTreeClassifier(max_depth=8), random_state=seed, progress=progress).fit(split.parties)
        bar.update()
        l0 = FedKT(teacher, student, **settings).fit(split.parties, split.X_public)
        bar.update()
        l1 = FedKT(teacher, student, privacy="L1", gamma=gamma, query_fraction=query_fraction, **settings)
        l1.fit(split.parties, split.X_public)
        bar.update()
    elapsed = time.perf_counter() - start
    from privfed.evaluation import evaluate_accuracy

    path = save_bundle(l1, out, overwrite=overwrite, metrics=evaluate_accuracy(l1, split.X_test, split.y_test),
                       data={"public": split.X_public, "test": split.X_test},
                       intended_use="A demonstration of FedKT-L1 on scikit-learn's digits (20 simulated parties); "
                                    "not for any real decision.")
    return {
        "solo": solo.score(split.X_test, split.y_test),
        "l0": l0.score(split.X_test, split.y_test),
        "l1": l1.score(split.X_test, split.y_test),
        "queries": l1.n_queries_answered_,
        "party": l1.ledger_.account(delta=l1.delta, unit="party"),
        "party_classic": l1.ledger_.account(delta=l1.delta, unit="party", analysis="classic"),
        "example": l1.ledger_.account(delta=l1.delta, unit="example"),
        "seconds": elapsed,
        "bundle": path,
    }


def _demo_command(args: argparse.Namespace) -> int:
    # Everything is checked before the 15-40 s of training.
    out = check_output_folder(args.out, "--out", overwrite=args.overwrite)
    check_gamma(args.gamma, 1)  # one partition: one party or one example moves one consistent vote
    if args.query_fraction * PUBLIC_SIZE < 1:
        raise ValueError(f"--query-fraction must be in [{1 / PUBLIC_SIZE:g}, 1] (at least one of the {PUBLIC_SIZE} "
                         f"public images), got {args.query_fraction:g}")
    from privfed.accounting.report import round_up

    result = run_demo(out, gamma=args.gamma, query_fraction=args.query_fraction, seed=args.seed,
                      overwrite=args.overwrite)
    party, classic, example = result["party"], result["party_classic"], result["example"]
    print("FedKT on scikit-learn digits: 20 parties (Dirichlet β = 1), 500 public images, 297 test images")
    rows = [
        ("SOLO (each party alone), mean accuracy", result["solo"]),
        ("FedKT-L0 (no noise, no guarantee)", result["l0"]),
        (f"FedKT-L1 (γ = {args.gamma:g}, {result['queries']} server queries)", result["l1"]),
    ]
    for label, accuracy in rows:
        print(f"  {label:<46} accuracy {accuracy:.3f}")
    print(f"  trained in {result['seconds']:.1f} s")
    print("Privacy of the FedKT-L1 model (from its ledger):")
    print(f"  {party.summary()}")
    print(f"  classic analysis (the paper's): ε = {round_up(classic.epsilon)}")
    print(f"  example level: ε = {round_up(example.epsilon)} (k = s: one example can change its party's students)")
    for note in party.notes:
        if note.startswith("UNACCOUNTED"):
            print(f"  {note}")
    print("  (1,797 small images cannot buy a small ε: PATE needs many voters; see docs/results.md for Adult)")
    print(f"Bundle written to {result['bundle']} (model, ledger.json, MODEL_CARD.md; no private evidence)")
    return EXIT_OK


def add_demo_command(commands: argparse._SubParsersAction) -> None:
    """Register ``privfed demo``."""
    demo = commands.add_parser(
        "demo", help="run FedKT-L1 on scikit-learn's digits and write a bundle",
        description="Train FedKT-L1 on scikit-learn's digits split among 20 parties (about 15-40 s on a laptop), "
                    "print its accuracy beside SOLO and the noiseless FedKT-L0, and write the FedKT-L1 model with "
                    "its privacy ledger and model card to --out. Arguments and --out are checked before training.",
        epilog="examples:\n"
               "  privfed demo --out my-bundle && privfed audit my-bundle\n"
               "  privfed demo --out my-bundle --gamma 0.2 --overwrite\n\n"
               "exit codes: 0 ok, 2 bad input, 130 interrupted (nothing written)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("--out", default="privfed-demo-bundle", help="bundle folder to write (default %(default)s)")
    demo.add_argument("--gamma", type=number_in(0, float("inf"), high_open=True), default=0.5,
                      help="Laplace noise parameter γ of the server votes, in (0, 354.5] (default %(default)s)")
    demo.add_argument("--query-fraction", type=number_in(0, 1), default=0.2,
                      help=f"fraction of the {PUBLIC_SIZE} public images queried, in [0.002, 1] (default %(default)s)")
    demo.add_argument("--seed", type=integer_at_least(0), default=0, help="random seed, >= 0 (default 0)")
    demo.add_argument("--overwrite", action="store_true", help="replace a bundle already in --out")
    demo.set_defaults(handler=_demo_command)
