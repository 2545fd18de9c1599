"""Model adapters every pipeline trains through: scikit-learn-style fitting on label subsets (``fitting``), the
torch classifier (``torch_classifier``, its input checks ``torch_inputs``), FedKT's networks (``torch_models``), their
training loop and serialisation, batched training of many small copies, and DP-SGD (``dp_config``,
``dp_training``: Opacus with secret noise). Imports ``privfed.accounting`` and ``protocol``; torch
and Opacus only where a torch model is used.
"""
