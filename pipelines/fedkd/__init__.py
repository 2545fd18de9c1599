"""FedKD (Gong et al. 2022): a quantized, noisy ensemble of the parties' logits on the public set.

``estimator`` (the ``FedKD`` driver), ``steps`` (a party's local model and quantized logits), ``server`` (the noisy
ensemble and the student), ``secure`` (the Skellam shares and their secure sum). Imports ``privfed.accounting``
and the shared pieces of ``pipelines`` (``protocol``, ``data``, ``models``), never another pipeline.
"""
