"""W2 — throughput: zero apiserver latency, no QPS limit.

One status patch for each of ``w2_pods`` distinct pods, submitted from one thread as fast as it
can; the figure is calls resolved per second from the first submit to the last resolution (what
the machinery itself costs, since the apiserver costs nothing). Benchmark-only code.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import wait

from adapters.memory import InMemoryApiServer
from benchmarks.workloads.common import (
    Profile,
    Record,
    create_pods,
    error_count,
    freeze_setup,
    record,
    requests_by_op,
    unfreeze,
    unschedulable,
)
from benchmarks.workloads.contenders import make_contender

WORKLOAD = "W2"


def run(profile: Profile, contender: str) -> Record:
    """Run W2 on ``contender``. Caller thread."""
    server = InMemoryApiServer()
    pods = create_pods(server, profile.w2_pods, "w2")
    conds = [unschedulable(f"attempt 1 of pod {i}") for i in range(len(pods))]
    c = make_contender(contender, server, qps=math.inf)
    freeze_setup()
    try:
        start = time.perf_counter()
        futures = [c.submit_status(pod, cond) for pod, cond in zip(pods, conds, strict=True)]
        submitted = time.perf_counter()
        wait(futures)
        end = time.perf_counter()
    finally:
        c.stop(drain=True, timeout=60.0)
        unfreeze()
    elapsed = end - start
    return record(
        WORKLOAD,
        contender,
        {"pods": len(pods), "latency_s": 0.0, "qps": "unlimited"},
        {
            "calls": len(futures),
            "elapsed_s": elapsed,
            "throughput_per_s": len(futures) / elapsed,
            "submit_phase_s": submitted - start,
            "requests": sum(requests_by_op(server).values()),
            "errors": error_count(futures),
        },
    )
