"""The evidence pack for people who will not install privfed: ``pack`` writes it (``privfed evidence``) and
``verify_script`` is the standalone ``verify.py`` it ships (dp-accounting and model-signing only). Imports
``privfed.accounting``, ``privfed.bundle`` and ``privfed.audit`` (the audit the pack ships), never the CLI.
"""
