"""W6 — memory and start cost per tracked object.

For each size in ``w6_sizes`` and each contender, a fresh interpreter (so earlier workloads
cannot lend it freed memory) builds that many pods, starts the contender, warms it up with one
batch of calls on other pods, collects garbage and reads its RSS; then submits, batch by batch,
one status patch per pod that the pod already satisfies — for kdispatch this spawns one object
actor per pod, which observes the pod, resolves the call as skipped and stays alive, idle and
tracked. Once every call has resolved and
garbage is collected again, the RSS delta divided by the number of pods is the memory per
tracked object; the time from the first submit to the last resolution, divided likewise, is the
start cost. Contenders without per-object state show what merely handling one call costs.

Run one measurement by hand with ``python -m benchmarks.workloads.memory CONTENDER SIZE`` (prints
one JSON line). Benchmark-only code.
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import wait
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from benchmarks.baselines import Contender
from benchmarks.workloads.common import Profile, Record, record, unschedulable
from benchmarks.workloads.contenders import make_contender
from kdispatch import Obj
from kdispatch.testing import InMemoryApiServer, make_pod

WORKLOAD = "W6"
ROOT = Path(__file__).resolve().parents[2]


def _rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


BATCH = 200
"""Calls in flight at once: transient garbage (futures, calls) stays bounded by one batch, and a
warm-up batch grows the allocator's arenas to that peak before the first RSS reading."""


def _submit_all(c: Contender, pods: list[Obj], cond: dict[str, str]) -> int:
    """Submit one call per pod, ``BATCH`` at a time; return how many resolved."""
    resolved = 0
    for i in range(0, len(pods), BATCH):
        futures = [c.submit_status(pod, cond) for pod in pods[i : i + BATCH]]
        done, _ = wait(futures, timeout=120.0)
        resolved += len(done)
    return resolved


def measure(contender: str, size: int) -> dict[str, Any]:
    """In this process: track ``size`` idle objects on ``contender`` and return the figures."""
    cond = unschedulable()
    pods: list[Obj] = []
    for i in range(size + BATCH):
        pod = make_pod(f"w6-{i}")
        pod["metadata"]["resourceVersion"] = "1"
        pod["status"]["conditions"] = [dict(cond)]
        pods.append(pod)
    c = make_contender(contender, InMemoryApiServer(), qps=math.inf)
    try:
        _submit_all(c, pods[size:], cond)  # warm-up: threads, code paths, allocator arenas
        before = _rss()
        start = time.perf_counter()
        resolved = _submit_all(c, pods[:size], cond)
        elapsed = time.perf_counter() - start
        after = _rss()
        live = c.stats().get("live_actors")
    finally:
        c.stop(drain=True, timeout=30.0)
    return {
        "objects": size,
        "resolved": resolved,
        "live_objects": live,
        "rss_delta_bytes": after - before,
        "bytes_per_object": (after - before) / size,
        "start_us_per_object": elapsed / size * 1e6,
    }


def _child(contender: str, size: int) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.workloads.memory", contender, str(size)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(profile: Profile, contender: str) -> Record:
    """Run W6 on ``contender``: one fresh interpreter per size. Caller thread."""
    points = [_child(contender, size) for size in profile.w6_sizes]
    figures: dict[str, Any] = {}
    for pt in points:
        n = pt["objects"]
        figures[f"bytes_per_object_{n}"] = pt["bytes_per_object"]
        figures[f"start_us_per_object_{n}"] = pt["start_us_per_object"]
    largest = points[-1]
    figures["bytes_per_object"] = largest["bytes_per_object"]
    figures["kib_per_object"] = largest["bytes_per_object"] / 1024
    figures["start_us_per_object"] = largest["start_us_per_object"]
    figures["live_objects"] = largest["live_objects"]
    return record(
        WORKLOAD,
        contender,
        {"sizes": list(profile.w6_sizes)},
        figures,
        {
            "objects": [pt["objects"] for pt in points],
            "bytes_per_object": [pt["bytes_per_object"] for pt in points],
            "start_us_per_object": [pt["start_us_per_object"] for pt in points],
        },
    )


def main(argv: list[str]) -> None:
    """Child entry point: ``CONTENDER SIZE`` → one JSON line on stdout."""
    contender, size = argv[0], int(argv[1])
    print(json.dumps(measure(contender, size)))


if __name__ == "__main__":
    main(sys.argv[1:])
