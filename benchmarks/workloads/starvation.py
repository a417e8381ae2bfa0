"""W4 — starvation of bindings behind status patches (the regression of kubernetes#135900).

A simulated scheduler on one thread, against an apiserver that answers in ``w4_latency``
seconds, with a shared client limit of ``w4_qps`` (burst 100):

* ``w4_unschedulable`` pods fail their first attempt in the first second, then are retried each
  time their backoff expires (``w4_backoff_initial`` doubling up to ``w4_backoff_max``); every
  attempt submits the same ``PodScheduled=False`` status patch with the same message, as a real
  scheduler repeats it for a pod whose situation did not change (so a contender that drops
  no-op patches can drop the repeats once the first one landed);
* ``w4_arrivals_per_s`` new schedulable pods arrive per second — one in each
  ``1 / w4_arrivals_per_s`` slot, at a seeded random instant within it, so arrivals keep the
  rate without locking onto the token bucket's rhythm — each bound at once to one of
  ``w4_nodes`` nodes (the bind decision submits a binding).

An informer feeds every pod update to the contender. After ``w4_seconds`` the scheduler stops
(a scheduler that fell behind leaves the pods it did not reach undecided); bindings still
outstanding get ``w4_drain`` more seconds to finish, after which their waits are counted as they
stand: such waits are censored (the true wait is longer), counted in ``binding_unfinished``, and
make that contender's percentiles lower bounds.

Figures: binding wait p50/p99 (from the bind decision to the binding's completion), arrival to
bound (for the blocking contender the decision itself is late), pods bound per second, the
status-patch backlog (submitted and not yet resolved) over time. Benchmark-only code.
"""

from __future__ import annotations

import heapq
import math
import random
import threading
import time
from concurrent.futures import Future, wait
from functools import partial
from typing import Any

from benchmarks.baselines import Contender
from benchmarks.workloads.common import (
    Informer,
    Profile,
    Record,
    create_nodes,
    create_pods,
    frozen,
    percentile,
    record,
    requests_by_op,
    unschedulable,
)
from benchmarks.workloads.contenders import make_contender
from kdispatch.testing import InMemoryApiServer, Latency

WORKLOAD = "W4"
SAMPLE_EVERY = 0.25  # seconds between two backlog samples
RETRY, ARRIVAL = 0, 1

Event = tuple[float, int, int, int]  # (due, kind, index, attempt)


class _Scheduler:
    """The simulated scheduler and what it measures. ``run`` is the scheduler thread; the
    done-callbacks run on whichever thread resolves a future; ``sample`` on the sampler
    thread."""

    def __init__(self, profile: Profile, server: InMemoryApiServer, contender: Contender) -> None:
        p = self.p = profile
        self.c = contender
        self.nodes = create_nodes(server, p.w4_nodes)
        self.failing = create_pods(server, p.w4_unschedulable, "w4-unsched")
        rng = random.Random(4)
        slots = int(p.w4_seconds * p.w4_arrivals_per_s)
        self.arrival_t = [(j + rng.random()) / p.w4_arrivals_per_s for j in range(slots)]
        self.arriving = create_pods(server, len(self.arrival_t), "w4-new")
        self.cache = {pod["metadata"]["uid"]: pod for pod in self.failing + self.arriving}
        self.events: list[Event] = [
            (rng.uniform(0.0, 1.0), RETRY, i, 1) for i in range(len(self.failing))
        ]
        self.events += [(t, ARRIVAL, j, 0) for j, t in enumerate(self.arrival_t)]
        heapq.heapify(self.events)
        self.lock = threading.Lock()
        self.status_submitted = 0
        self.status_resolved = 0
        self.decided: dict[int, float] = {}  # arrival index -> perf_counter of the decision
        self.completed: dict[int, float] = {}  # arrival index -> perf_counter of completion
        self.bind_futures: dict[int, Future[Any]] = {}
        self.backlog: list[list[float]] = []
        self.late = 0.0
        self.start = 0.0

    def _status_done(self, _fut: Future[Any]) -> None:
        with self.lock:
            self.status_resolved += 1

    def _bind_done(self, index: int) -> None:
        self.completed[index] = time.perf_counter()

    def sample(self, stop: threading.Event) -> None:
        """Sampler thread: the status-patch backlog every ``SAMPLE_EVERY`` seconds."""
        while not stop.wait(SAMPLE_EVERY):
            with self.lock:
                backlog = self.status_submitted - self.status_resolved
            self.backlog.append([time.perf_counter() - self.start, float(backlog)])

    def run(self) -> None:
        """Scheduler thread: handle every event due before the end of the window."""
        p = self.p
        while self.events and self.events[0][0] < p.w4_seconds:
            if time.perf_counter() - self.start >= p.w4_seconds:
                break  # a scheduler that fell behind leaves the rest undecided
            due, kind, index, attempt = heapq.heappop(self.events)
            now = time.perf_counter() - self.start
            if due > now:
                time.sleep(due - now)
            else:
                self.late = max(self.late, now - due)
            if kind == RETRY:
                self._retry(due, index, attempt)
            else:
                self._bind(index)

    def _retry(self, due: float, index: int, attempt: int) -> None:
        p = self.p
        n = len(self.nodes)
        cond = unschedulable(f"0/{n} nodes are available: {n} Insufficient cpu.")
        with self.lock:
            self.status_submitted += 1
        pod = self.cache[self.failing[index]["metadata"]["uid"]]
        self.c.submit_status(pod, cond).add_done_callback(self._status_done)
        backoff = min(p.w4_backoff_initial * 2 ** (attempt - 1), p.w4_backoff_max)
        heapq.heappush(self.events, (due + backoff, RETRY, index, attempt + 1))

    def _bind(self, index: int) -> None:
        pod = self.cache[self.arriving[index]["metadata"]["uid"]]
        self.decided[index] = time.perf_counter()
        fut = self.c.submit_binding(pod, self.nodes[index % len(self.nodes)])
        self.bind_futures[index] = fut
        fut.add_done_callback(lambda _f: self._bind_done(index))


def run(profile: Profile, contender: str) -> Record:
    """Run W4 on ``contender``. Caller thread (the simulated scheduler)."""
    p = profile
    server = InMemoryApiServer(latency=Latency(fixed=p.w4_latency))
    c = make_contender(contender, server, qps=p.w4_qps, burst=100)
    sim = _Scheduler(p, server, c)
    informer = Informer(server, sim.cache, c.observe).start()
    stop_sampling = threading.Event()
    sampler = threading.Thread(target=sim.sample, args=(stop_sampling,), daemon=True)
    with frozen(
        stop_sampling.set, partial(c.stop, drain=False, timeout=10.0), informer.stop, sampler.join
    ):
        sim.start = time.perf_counter()
        sampler.start()
        sim.run()
        window_end = time.perf_counter()
        wait(list(sim.bind_futures.values()), timeout=p.w4_drain)
        drain_end = time.perf_counter()
        # Judge every binding before stopping the contender resolves what is left.
        state = {
            j: "unfinished" if not f.done() else ("error" if f.exception() else "ok")
            for j, f in sim.bind_futures.items()
        }
    return _summarize(sim, server, state, window_end, drain_end)


def _summarize(
    sim: _Scheduler,
    server: InMemoryApiServer,
    state: dict[int, str],
    window_end: float,
    drain_end: float,
) -> Record:
    p, start = sim.p, sim.start
    waits: list[float] = []
    e2e: list[float] = []
    decided_t: list[float] = []
    for j, t_decided in sim.decided.items():
        t_done = sim.completed[j] if state[j] == "ok" else drain_end
        waits.append(t_done - t_decided)
        decided_t.append(t_decided - start)
        e2e.append(t_done - (start + sim.arrival_t[j]))
    in_window = [t for t in sim.completed.values() if t <= window_end]
    window = window_end - start
    per_second = [0] * (int(window) + 1)
    for t in in_window:
        per_second[min(len(per_second) - 1, int(t - start))] += 1
    token_interval = 1.0 / p.w4_qps
    backlog = sim.backlog
    ideal = _ideal_waits(sim.arrival_t, token_interval, p.w4_latency)
    return record(
        WORKLOAD,
        sim.c.name,
        {
            "seconds": p.w4_seconds,
            "nodes": p.w4_nodes,
            "unschedulable": p.w4_unschedulable,
            "arrivals_per_s": p.w4_arrivals_per_s,
            "qps": p.w4_qps,
            "burst": 100,
            "latency_s": p.w4_latency,
            "backoff_s": [p.w4_backoff_initial, p.w4_backoff_max],
            "drain_s": p.w4_drain,
        },
        {
            "binding_wait_p50_ms": percentile(waits, 0.5) * 1000,
            "binding_wait_p99_ms": percentile(waits, 0.99) * 1000,
            "binding_wait_max_ms": max(waits, default=0.0) * 1000,
            "binding_wait_p99_token_intervals": percentile(waits, 0.99) / token_interval,
            "ideal_binding_wait_p99_ms": percentile(ideal, 0.99) * 1000,
            "arrival_to_bound_p50_ms": percentile(e2e, 0.5) * 1000,
            "arrival_to_bound_p99_ms": percentile(e2e, 0.99) * 1000,
            "arrivals_due": len(sim.arrival_t),
            "bind_decisions": len(sim.decided),
            "undecided": len(sim.arrival_t) - len(sim.decided),
            "bound_in_window": len(in_window),
            "bound_per_s": len(in_window) / window,
            "binding_unfinished": sum(1 for v in state.values() if v == "unfinished"),
            "binding_errors": sum(1 for v in state.values() if v == "error"),
            "status_calls": sim.status_submitted,
            "status_requests": requests_by_op(server).get("patch_status", 0),
            "binding_requests": requests_by_op(server).get("bind", 0),
            "status_backlog_max": max((b for _, b in backlog), default=0.0),
            "status_backlog_end": backlog[-1][1] if backlog else 0.0,
            "scheduler_lag_max_s": sim.late,
            "requests_by_op": requests_by_op(server),
        },
        {
            "backlog_t_s": [t for t, _ in backlog],
            "backlog": [b for _, b in backlog],
            "bound_per_second": per_second,
            "binding_decided_t_s": decided_t,
            "binding_wait_ms": [w * 1000 for w in waits],
        },
    )


def _ideal_waits(arrivals: list[float], token_interval: float, latency: float) -> list[float]:
    """Binding waits of a perfect scheduler for these arrivals: the status-patch backlog keeps
    the bucket empty, so tokens come one per ``token_interval``; every token goes to the oldest
    waiting binding first; the binding then takes ``latency``. The floor any contender can
    reach (used as a reference in the report)."""
    waits = []
    free = 0.0
    for t in arrivals:
        token = max(math.ceil(t / token_interval) * token_interval, free)
        free = token + token_interval
        waits.append(token - t + latency)
    return waits
