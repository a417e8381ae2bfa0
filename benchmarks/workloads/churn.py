"""W3 — churn: unschedulable pods retried many times, then bound.

``w3_pods`` pods each fail ``w3_retries`` scheduling attempts in a row, ``w3_gap`` seconds apart
(a scheduler requeueing them on cluster events), every attempt asking for the same
``PodScheduled=False`` condition; once every status call has resolved (the pods stayed
unschedulable long enough for their status to be recorded), every pod is bound. An informer
keeps the scheduler's view of each pod current and feeds it to the contender. QPS ``w3_qps``,
apiserver latency ``w3_latency``.

Minimal: one status patch and one binding per pod. The figure is every request the apiserver saw
(failed ones and reads included) divided by that minimum. Benchmark-only code.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, wait
from functools import partial
from typing import Any

from benchmarks.workloads.common import (
    Informer,
    Profile,
    Record,
    create_pods,
    error_count,
    frozen,
    record,
    requests_by_op,
    unschedulable,
)
from benchmarks.workloads.contenders import make_contender
from kdispatch.testing import InMemoryApiServer, Latency

WORKLOAD = "W3"


def run(profile: Profile, contender: str) -> Record:
    """Run W3 on ``contender``. Caller thread (the simulated scheduler)."""
    server = InMemoryApiServer(latency=Latency(fixed=profile.w3_latency))
    pods = create_pods(server, profile.w3_pods, "w3")
    cache = {p["metadata"]["uid"]: p for p in pods}
    uids = list(cache)
    cond = unschedulable()
    c = make_contender(contender, server, qps=profile.w3_qps)
    informer = Informer(server, cache, c.observe).start()
    futures: list[Future[Any]] = []
    with frozen(partial(c.stop, drain=True, timeout=120.0), informer.stop):
        start = time.perf_counter()
        for _ in range(profile.w3_retries):
            for uid in uids:
                futures.append(c.submit_status(cache[uid], cond))
            time.sleep(profile.w3_gap)
        wait(futures)
        for i, uid in enumerate(uids):
            futures.append(c.submit_binding(cache[uid], f"node-{i % 100}"))
        wait(futures)
    elapsed = time.perf_counter() - start
    by_op = requests_by_op(server)
    sent = sum(by_op.values())
    minimal = 2 * len(pods)
    bound = sum(
        1
        for p in pods
        if (server.get_object("Pod", "default", p["metadata"]["name"]) or {})
        .get("spec", {})
        .get("nodeName")
    )
    return record(
        WORKLOAD,
        contender,
        {
            "pods": len(pods),
            "retries": profile.w3_retries,
            "gap_s": profile.w3_gap,
            "qps": profile.w3_qps,
            "latency_s": profile.w3_latency,
        },
        {
            "calls_submitted": len(futures),
            "requests": sent,
            "requests_by_op": by_op,
            "minimal": minimal,
            "ratio_to_minimal": sent / minimal,
            "pods_bound": bound,
            "errors": error_count(futures),
            "elapsed_s": elapsed,
        },
    )
