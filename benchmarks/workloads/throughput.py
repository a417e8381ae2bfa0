"""W2 — throughput: zero apiserver latency, no QPS limit.

One status patch for each of ``w2_pods`` distinct pods, submitted from one thread as fast as it
can; the figure is calls resolved per second from the first submit to the last resolution (what
the machinery itself costs, since the apiserver costs nothing), the median of ``w2_repeats``
runs, with the CPU time of every thread of the process per call over the same span.
Benchmark-only code.
"""

from __future__ import annotations

import math

from benchmarks.workloads.common import Profile, Record, create_pods, record, status_burst
from benchmarks.workloads.contenders import make_contender
from kdispatch.testing import InMemoryApiServer

WORKLOAD = "W2"


def _once(profile: Profile, contender: str) -> dict[str, float]:
    """One measurement on a fresh apiserver and contender."""
    server = InMemoryApiServer()
    pods = create_pods(server, profile.w2_pods, "w2")
    burst = status_burst(make_contender(contender, server, qps=math.inf), pods)
    calls = len(burst.futures)
    return {
        "calls": calls,
        "elapsed_s": burst.end - burst.start,
        "throughput_per_s": calls / (burst.end - burst.start),
        "submit_phase_s": burst.submitted - burst.start,
        "cpu_per_call_us": burst.cpu / calls * 1e6,
        "requests": len(server.request_log),
        "errors": burst.errors,
    }


def run(profile: Profile, contender: str) -> Record:
    """Run W2 on ``contender`` ``w2_repeats`` times; the figures are those of the median run.
    Caller thread."""
    runs = sorted(
        (_once(profile, contender) for _ in range(profile.w2_repeats)),
        key=lambda r: r["throughput_per_s"],
    )
    median = runs[len(runs) // 2]
    return record(
        WORKLOAD,
        contender,
        {
            "pods": profile.w2_pods,
            "latency_s": 0.0,
            "qps": "unlimited",
            "repeats": profile.w2_repeats,
        },
        {
            **median,
            "throughput_min_per_s": runs[0]["throughput_per_s"],
            "throughput_max_per_s": runs[-1]["throughput_per_s"],
        },
        {"throughput_per_s": [r["throughput_per_s"] for r in runs]},
    )
