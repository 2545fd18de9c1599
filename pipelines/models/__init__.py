"""Model adapters every pipeline trains through: scikit-learn-style fitting on label subsets (``fitting``), the
torch classifiers and their training loop and serialisation, batched training of many small copies, and DP-SGD
(``dp_config``, ``dp_training``: Opacus with secret noise). Imports ``privfed.accounting`` and ``protocol``; torch
and Opacus only where a torch model is used.
"""
