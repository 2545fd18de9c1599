"""PrivateKT (Qi et al. 2023): randomized response on actively sampled public examples, round by round.

``estimator`` (the ``PrivateKT`` driver), ``steps`` (a client's randomized-response report), ``server`` (sampling,
the knowledge buffer, the rounds and their checkpoints). Imports ``privfed.accounting`` and the shared pieces of
``pipelines`` (``protocol``, ``data``, ``models``), never another pipeline.
"""
