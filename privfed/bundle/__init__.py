"""The bundle a fitted pipeline is published as: its folder's files (``layout``), writing it (``save``), reading and
verifying it (``load``), the model families and their safe formats (``families``), its manifest and signatures
(``manifest``, ``signing``, ``model_signature``, ``model_signature_verify``), the model card and privacy statement,
and ``publish``. Imports ``privfed.accounting``, ``privfed.evaluation`` and, to check a signature,
``privfed.audit``; a pipeline only through the fitted estimator it is given (and the model classes a load looks up
by name); never the CLI.
"""
