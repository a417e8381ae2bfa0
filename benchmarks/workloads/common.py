"""Shared pieces of the workloads: run profiles (sizes), pods, an informer, timing helpers and
the result record format.

Benchmark-only code. A result record is a plain JSON dict::

    {"workload": "W4", "contender": "kdispatch", "params": {...}, "figures": {...},
     "series": {...}}

``figures`` are the scalar results the summary compares; ``series`` are lists for the charts.
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.baselines import Contender
from kdispatch import Obj
from kdispatch.testing import InMemoryApiServer, make_node, make_pod

Record = dict[str, Any]

UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/1000 nodes are available: 1000 Insufficient cpu.",
}
"""The condition an unschedulable pod gets (the message varies where a workload says so)."""


def unschedulable(message: str | None = None) -> dict[str, str]:
    """The ``PodScheduled=False`` condition, with ``message`` if given."""
    cond = dict(UNSCHEDULABLE)
    if message is not None:
        cond["message"] = message
    return cond


@dataclass(frozen=True)
class Profile:
    """Sizes of one benchmark run. ``tiny`` is for the smoke test, ``quick`` finishes in a few
    minutes on 2 cores, ``full`` runs the sizes of the issue."""

    name: str
    # W1 submit latency
    w1_objects: int
    w1_latency: float
    w1_rate: float  # submits per second
    w1_seconds: float
    w1_blocking_samples: int
    # W2 throughput
    w2_pods: int
    w2_repeats: int
    # W3 churn
    w3_pods: int
    w3_retries: int
    w3_gap: float  # seconds between two rounds of retries
    w3_qps: float
    w3_latency: float
    # W4 starvation
    w4_seconds: float
    w4_nodes: int
    w4_unschedulable: int
    w4_arrivals_per_s: float
    w4_qps: float
    w4_latency: float
    w4_backoff_initial: float
    w4_backoff_max: float
    w4_drain: float  # seconds the outstanding bindings get after the window
    # W5 budget
    w5_calls: int
    w5_qps: float
    w5_burst: int
    w5_latency: float
    # W6 memory
    w6_sizes: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON form for results.json."""
        return asdict(self)


_SIZES: dict[str, tuple[Any, Any, Any]] = {
    # field: (tiny, quick, full)
    # W1 submit latency
    "w1_objects": (200, 10_000, 10_000),
    "w1_latency": (0.02, 0.02, 0.02),
    "w1_rate": (400.0, 500.0, 500.0),
    "w1_seconds": (0.3, 4.0, 15.0),
    "w1_blocking_samples": (5, 100, 300),
    # W2 throughput
    "w2_pods": (200, 4_000, 20_000),
    "w2_repeats": (1, 5, 7),
    # W3 churn
    "w3_pods": (20, 200, 1_000),
    "w3_retries": (3, 10, 20),
    "w3_gap": (0.005, 0.01, 0.01),
    "w3_qps": (500.0, 200.0, 200.0),
    "w3_latency": (0.001, 0.002, 0.002),
    # W4 starvation
    "w4_seconds": (0.6, 30.0, 180.0),
    "w4_nodes": (10, 1_000, 1_000),
    "w4_unschedulable": (40, 2_000, 2_000),
    "w4_arrivals_per_s": (20.0, 50.0, 50.0),
    "w4_qps": (100.0, 100.0, 100.0),
    "w4_latency": (0.002, 0.005, 0.005),
    "w4_backoff_initial": (0.2, 1.0, 1.0),
    "w4_backoff_max": (0.5, 10.0, 10.0),
    "w4_drain": (1.0, 10.0, 60.0),
    # W5 budget
    "w5_calls": (60, 600, 3_000),
    "w5_qps": (200.0, 100.0, 100.0),
    "w5_burst": (10, 100, 100),
    "w5_latency": (0.001, 0.005, 0.005),
    # W6 memory
    "w6_sizes": ((200,), (1_000, 10_000), (1_000, 10_000, 50_000)),
}
"""Every size of every profile, one field a row."""

TINY, QUICK, FULL = (
    Profile(name=name, **{size: row[i] for size, row in _SIZES.items()})
    for i, name in enumerate(("tiny", "quick", "full"))
)

PROFILES = {p.name: p for p in (TINY, QUICK, FULL)}


def record(
    workload: str,
    contender: str,
    params: dict[str, Any],
    figures: dict[str, Any],
    series: dict[str, Any] | None = None,
) -> Record:
    """One result record (see the module docstring)."""
    return {
        "workload": workload,
        "contender": contender,
        "params": params,
        "figures": figures,
        "series": series or {},
    }


# --------------------------------------------------------------------------- objects


def create_pods(
    server: InMemoryApiServer,
    count: int,
    prefix: str,
    conditions: Sequence[dict[str, str]] = (),
) -> list[Obj]:
    """Create ``count`` pending pods (with ``conditions`` already in their status) and return
    them as stored."""
    out: list[Obj] = []
    for i in range(count):
        pod = make_pod(f"{prefix}-{i}")
        if conditions:
            pod["status"]["conditions"] = [dict(c) for c in conditions]
        out.append(server.create(pod))
    return out


def create_nodes(server: InMemoryApiServer, count: int) -> list[str]:
    """Create ``count`` nodes; return their names."""
    names = [f"node-{i}" for i in range(count)]
    for name in names:
        server.create(make_node(name, 32_000, 131_072))
    return names


class Informer:
    """A pod informer: a thread that follows the server's watch, keeps ``cache`` (uid → newest
    pod) current and hands every update to ``on_update`` (a contender's ``observe``)."""

    def __init__(
        self,
        server: InMemoryApiServer,
        cache: dict[str, Obj],
        on_update: Callable[[Obj], None],
    ) -> None:
        self._cache = cache
        self._on_update = on_update
        self._watch = server.watch("Pod", resource_version=server.resource_version)
        self._thread = threading.Thread(target=self._run, name="bench-informer", daemon=True)
        self.events = 0

    def start(self) -> Informer:
        """Caller thread."""
        self._thread.start()
        return self

    def _run(self) -> None:
        """Informer thread."""
        for event in self._watch:
            pod = event.object
            self._cache[pod["metadata"]["uid"]] = pod
            self.events += 1
            self._on_update(pod)

    def stop(self) -> None:
        """Caller thread: end the watch and join the thread."""
        self._watch.stop()
        self._thread.join()


# --------------------------------------------------------------------------- HTTP server child


def serve_http(server: InMemoryApiServer) -> None:
    """The ``--serve`` child of :func:`http_server_process`: serve ``server`` over HTTP, print
    its URL and keep serving until stdin closes. Main thread of the child."""
    from kdispatch.testing import ApiServerHTTP

    with ApiServerHTTP(server) as srv:
        print(srv.url, flush=True)
        sys.stdin.read()


@contextmanager
def http_server_process(module: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Run ``python -m <module> --serve`` (a child that calls :func:`serve_http`) and yield it
    with the URL it serves; on exit, close its stdin and wait for it. Calling thread."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"server did not start: {url!r}")
        yield proc, url
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(30)


# --------------------------------------------------------------------------- measuring


def thread_role(name: str) -> str:
    """Which part of the dispatcher a thread of this process is."""
    if name == "MainThread":
        return "caller"
    if name.startswith("kdispatch-executor-"):
        return "executor timer" if name.endswith("-timer") else "executor workers"
    if name.startswith("kdispatch-pool-"):
        return "actor pool"
    return "other"


def publish(
    result: dict[str, Any],
    meta: dict[str, Any],
    table: Callable[[dict[str, Any]], str],
    json_path: Path | None,
    load_start: list[float],
) -> None:
    """Caller thread. Attach ``meta`` (with the load average at the start and now) to
    ``result``, print ``table(result)`` and the load average, and write the JSON if asked."""
    result["meta"] = {
        **meta,
        "load_average": {"start": load_start, "end": list(os.getloadavg())},
    }
    print(table(result))
    load = result["meta"]["load_average"]
    print(f"load average (1, 5, 15 min): start {load['start']}, end {load['end']}")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2) + "\n")


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of a non-empty series of repeated measurements."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-quantile (0..1) by the nearest-rank method; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def on_done(fut: Future[Any], callback: Callable[[float, Future[Any]], None]) -> None:
    """Call ``callback(perf_counter_at_completion, fut)`` once ``fut`` resolves (on the resolving
    thread, or at once if it already has)."""
    fut.add_done_callback(lambda f: callback(time.perf_counter(), f))


def error_count(futures: Iterable[Future[Any]]) -> int:
    """Resolved futures that raised."""
    return sum(1 for f in futures if f.done() and f.exception() is not None)


def requests_by_op(server: InMemoryApiServer, since: int = 0) -> dict[str, int]:
    """Requests the server saw (every outcome), by op, from request-log index ``since`` on."""
    out: dict[str, int] = {}
    for rec in server.request_log[since:]:
        out[rec.op] = out.get(rec.op, 0) + 1
    return out


def finite(value: float) -> float | None:
    """``value`` for JSON, or None when it is NaN/inf."""
    return value if math.isfinite(value) else None


def freeze_setup() -> None:
    """Collect, then move every object that exists now (the workload's pods, the apiserver's
    store, the contender's own structures) out of the cyclic garbage collector's reach, so that
    full collections scan only what the run itself allocates. Applied to every contender alike;
    undone by :func:`unfreeze`."""
    gc.collect()
    gc.freeze()


def unfreeze() -> None:
    """Give the frozen objects back to the collector (end of a workload)."""
    gc.unfreeze()
    gc.collect()


@contextmanager
def frozen(*stops: Callable[[], object]) -> Iterator[None]:
    """Caller thread. Run the block with the setup frozen (:func:`freeze_setup`); however it
    ends, call ``stops`` in order (the contender's ``stop`` first, then its informer's and
    samplers'), then :func:`unfreeze`."""
    freeze_setup()
    try:
        yield
    finally:
        for stop in stops:
            stop()
        unfreeze()


@dataclass(frozen=True)
class Burst:
    """What :func:`status_burst` measured: ``clock`` readings at the first submit, after the last
    one and once every future had resolved, and the CPU seconds of every thread of the process
    over that span."""

    futures: list[Future[Any]]
    start: float
    submitted: float
    end: float
    cpu: float

    @property
    def errors(self) -> int:
        """Calls that failed."""
        return error_count(self.futures)


def status_burst(
    contender: Contender, pods: Sequence[Obj], clock: Callable[[], float] = time.perf_counter
) -> Burst:
    """Caller thread. One status patch for each of ``pods`` (each with its own message),
    submitted from this thread as fast as it can with the setup :func:`frozen`, and waited for;
    then ``contender`` stops (draining, within 60 s)."""
    conds = [unschedulable(f"attempt 1 of pod {i}") for i in range(len(pods))]
    with frozen(partial(contender.stop, drain=True, timeout=60.0)):
        cpu_start = time.process_time()  # every thread of the process
        start = clock()
        futures = [contender.submit_status(p, cond) for p, cond in zip(pods, conds, strict=True)]
        submitted = clock()
        wait(futures)
        end = clock()
        cpu = time.process_time() - cpu_start
    return Burst(futures, start, submitted, end, cpu)
