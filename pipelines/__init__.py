"""Federated knowledge-transfer pipelines: partitioning, model adapters, FedKT, FedKD, PrivateKT, Selective-FD."""
