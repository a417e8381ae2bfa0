"""Benchmarks (not tests): each module runs with ``python -m benchmarks.<name> --json PATH``."""
