"""W1 — submit latency with many live objects and a slow apiserver.

``w1_objects`` pods are made live first (one call each: for kdispatch that spawns an object
actor per pod, which then stays idle and tracked). Then one scheduler thread submits a status
patch with a new message for a random pod ``w1_rate`` times per second for ``w1_seconds``
while the apiserver answers every request in ``w1_latency`` seconds (no QPS limit). Each
``submit_*`` call is timed on its own: that is what the scheduling cycle pays, building the call
from the pod included. Contenders that take prebuilt call objects (kdispatch and the upstream
model) are also timed on alternate samples with the call built before the clock starts — the
submission alone (``submit_only_*``). The blocking contender pays the whole request, so it is
sampled ``w1_blocking_samples`` times only. ``submit_max_us`` is the longest single submit of
either kind and ``gc_full_max_ms`` the longest full (generation 2) collection while sampling.
Benchmark-only code.
"""

from __future__ import annotations

import math
import random
import time
from concurrent.futures import Future, wait
from typing import Any

from benchmarks.workloads.common import (
    Profile,
    Record,
    create_pods,
    error_count,
    freeze_setup,
    percentile,
    record,
    unfreeze,
    unschedulable,
)
from benchmarks.workloads.contenders import make_contender
from examples.gcwatch import GcWatch
from kdispatch import PodStatusPatch
from kdispatch.testing import InMemoryApiServer, Latency

WORKLOAD = "W1"
QUANTILES = [i / 200 for i in range(1, 200)] + [0.999, 0.9999, 1.0]


def run(profile: Profile, contender: str) -> Record:
    """Run W1 on ``contender``. Caller thread (the simulated scheduler)."""
    server = InMemoryApiServer(latency=Latency(fixed=profile.w1_latency))
    settled = unschedulable()
    pods = create_pods(server, profile.w1_objects, "w1", conditions=[settled])
    c = make_contender(contender, server, qps=math.inf)
    rng = random.Random(1)
    samples_ns: list[int] = []
    only_ns: list[int] = []
    submit_call = getattr(c, "submit_call", None)
    futures: list[Future[Any]] = []
    watch = GcWatch()
    try:
        if contender != "blocking":  # blocking keeps no per-object state to warm up
            wait([c.submit_status(p, settled) for p in pods])
        freeze_setup()
        watch.install()
        live = c.stats().get("live_actors")
        count = (
            profile.w1_blocking_samples
            if contender == "blocking"
            else int(profile.w1_rate * profile.w1_seconds)
        )
        interval = 1.0 / profile.w1_rate
        due = time.perf_counter()
        for k in range(count):
            pod = pods[rng.randrange(len(pods))]
            cond = unschedulable(f"attempt {k}: 0/1000 nodes are available")
            if submit_call is not None and k % 2:
                call = PodStatusPatch.for_pod(pod, conditions=[cond])
                t0 = time.perf_counter_ns()
                fut = submit_call(call)
                only_ns.append(time.perf_counter_ns() - t0)
            else:
                t0 = time.perf_counter_ns()
                fut = c.submit_status(pod, cond)
                samples_ns.append(time.perf_counter_ns() - t0)
            futures.append(fut)
            due += interval
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
        watch.uninstall()
        wait(futures, timeout=60.0)
    finally:
        watch.uninstall()
        c.stop(drain=True, timeout=30.0)
        unfreeze()
    us = [s / 1000.0 for s in samples_ns]
    only = [s / 1000.0 for s in only_ns]
    series: dict[str, Any] = {
        "quantiles": QUANTILES,
        "submit_us_at_quantile": [percentile(us, q) for q in QUANTILES],
    }
    extra: dict[str, Any] = {}
    if only:
        series["submit_only_us_at_quantile"] = [percentile(only, q) for q in QUANTILES]
        extra = {
            "submit_only_p50_us": percentile(only, 0.5),
            "submit_only_p99_us": percentile(only, 0.99),
            "submit_only_p999_us": percentile(only, 0.999),
        }
    return record(
        WORKLOAD,
        contender,
        {
            "objects": len(pods),
            "latency_s": profile.w1_latency,
            "rate_per_s": profile.w1_rate,
            "samples": len(us) + len(only),
        },
        {
            "submit_p50_us": percentile(us, 0.5),
            "submit_p99_us": percentile(us, 0.99),
            "submit_p999_us": percentile(us, 0.999),
            "submit_max_us": max(us + only),
            "gc_full_max_ms": watch.longest_ms(2),
            "gc_full_collections": len(watch.pauses[2]),
            "submit_mean_us": sum(us) / len(us),
            **extra,
            "live_objects": live,
            "errors": error_count(futures),
        },
        series,
    )
