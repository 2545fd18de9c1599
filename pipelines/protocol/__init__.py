"""The protocol pieces every pipeline shares: wire messages, the party-task executor, round checkpoints, progress
bars, voting, pre-flight warnings, the secure sum's arithmetic, the silo budget gate, the DP-training reports a
party sends, the seeds ``random_state`` controls and the record of the noise parameters as run. Imports
``privfed.accounting`` only.
"""
