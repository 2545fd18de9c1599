"""Selective-FD (Shao, Wu, Zhang 2024): federated distillation with density-ratio selectors, and its baselines.

``estimator`` (the ``SelectiveFD``, ``FedMD`` and ``IndependentLearning`` drivers), ``steps`` (a client's setup,
share and distillation), ``server`` (the rounds' aggregation), ``kulsif`` and ``dp_selector`` (the density-ratio
selectors). Imports ``privfed.accounting`` and the shared pieces of ``pipelines`` (``protocol``, ``data``,
``models``), never another pipeline.
"""
