"""Selective-FD (Shao, Wu, Zhang 2024): federated distillation with density-ratio selectors, and its baselines.

``estimator`` (``SelectiveFD``), ``baselines`` (``FedMD``, ``IndependentLearning``), ``driver`` (the protocol driver
they share: validation, ``fit``, prediction), ``steps`` (a client's setup, share and distillation, and the messages),
``planned_releases`` (what each party step costs its silo's budget), ``local_clients`` (the parties of an in-process
run), ``aggregation`` (the server's step of a round), ``server`` (the server over a run: rounds, checkpoints,
ledger), ``kulsif`` and ``dp_selector`` (the density-ratio selectors). Imports ``privfed.accounting`` and the shared
pieces of ``pipelines`` (``protocol``, ``data``, ``models``), never another pipeline.
"""
