"""W5 — QPS budget used while a backlog exists.

``w5_calls`` status patches for distinct pods are submitted at once against a limit of
``w5_qps`` (burst ``w5_burst``) and an apiserver answering in ``w5_latency`` seconds. While the
backlog lasts, a perfect client sends exactly what the token bucket allows:
``burst + qps * duration``. The figure is the share of that budget actually used: requests sent
(every outcome) divided by the budget over the backlog's lifetime (first submit to the start of
the last request). Benchmark-only code.
"""

from __future__ import annotations

import time

from benchmarks.workloads.common import Profile, Record, create_pods, record, status_burst
from benchmarks.workloads.contenders import make_contender
from kdispatch.testing import InMemoryApiServer, Latency

WORKLOAD = "W5"
BIN = 0.5  # seconds per bin of the request-rate series


def run(profile: Profile, contender: str) -> Record:
    """Run W5 on ``contender``. Caller thread."""
    p = profile
    server = InMemoryApiServer(latency=Latency(fixed=p.w5_latency))
    pods = create_pods(server, p.w5_calls, "w5")
    c = make_contender(contender, server, qps=p.w5_qps, burst=p.w5_burst)
    burst = status_burst(c, pods, time.monotonic)  # the request log's clock
    start, end = burst.start, burst.end
    log = [r for r in server.request_log if r.t >= start]
    answered = [r.t for r in log]
    # A request is answered ``latency`` after it starts; the backlog lasts until the last start.
    last_start = max(answered, default=start) - p.w5_latency
    duration = max(last_start - start, 1e-9)
    budget = p.w5_burst + p.w5_qps * duration
    used = len(log)
    bins = [0] * (int((end - start) / BIN) + 1)
    for t in answered:
        bins[min(len(bins) - 1, int((t - p.w5_latency - start) / BIN))] += 1
    return record(
        WORKLOAD,
        contender,
        {
            "calls": len(pods),
            "qps": p.w5_qps,
            "burst": p.w5_burst,
            "latency_s": p.w5_latency,
        },
        {
            "requests": used,
            "backlog_s": duration,
            "budget": budget,
            "budget_used": used / budget,
            "elapsed_s": end - start,
            "errors": burst.errors,
        },
        {"bin_s": BIN, "requests_per_s": [n / BIN for n in bins]},
    )
