"""Workload types: what the requests do, one module per type."""
