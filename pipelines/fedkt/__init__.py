"""FedKT (Li, He, Song, IJCAI 2021): two-tier PATE with party-level (L1) and example-level (L2) privacy.

``estimator`` (the ``FedKT``, ``CentralizedPATE`` and ``Solo`` drivers), ``steps`` (each party's task, its teachers,
students and noisy votes), ``server`` (the replies, the server's noisy votes, the ledger and the final model),
``secure`` (the Skellam shares and their secure sum). Imports ``privfed.accounting`` and
the shared pieces of ``pipelines`` (``protocol``, ``data``, ``models``), never another pipeline.
"""
