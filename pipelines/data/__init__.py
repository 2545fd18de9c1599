"""Data and partitioning: the benchmark datasets, the official FedKT rows, partitions of parties and teachers, a
party's table files and the schema exchange every pipeline starts with. Imports ``privfed.accounting`` and
``protocol`` only.
"""
