"""The benchmark workloads W1 to W6, each a module with ``run(profile, contender) -> Record``.

Benchmark-only code; see :mod:`benchmarks.workloads.common` for the record format and the run
profiles, :mod:`benchmarks.workloads.contenders` for who runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.workloads import budget, churn, latency, memory, starvation, throughput
from benchmarks.workloads.common import Profile, Record


@dataclass(frozen=True)
class Workload:
    """A workload: its id, a one-line title and its entry point."""

    id: str
    title: str
    run: Callable[[Profile, str], Record]


WORKLOADS: dict[str, Workload] = {
    w.id: w
    for w in (
        Workload("W1", "Submit latency, 10k live objects, apiserver 20 ms", latency.run),
        Workload("W2", "Throughput, zero latency, no QPS limit", throughput.run),
        Workload("W3", "Churn: retries then binding, requests vs minimal", churn.run),
        Workload("W4", "Starvation: bindings behind a status-patch backlog", starvation.run),
        Workload("W5", "QPS budget used while a backlog exists", budget.run),
        Workload("W6", "Memory and start cost per tracked object", memory.run),
    )
}
"""Every workload by id, in order."""

__all__ = ["WORKLOADS", "Workload"]
