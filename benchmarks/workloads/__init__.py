"""The benchmark workloads W1–W6, each a module with ``run(profile, contender) -> Record``.

Benchmark-only code; see :mod:`benchmarks.workloads.common` for the record format and the run
profiles.
"""
