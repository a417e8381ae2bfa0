"""Baseline ``threadpool``: a ``ThreadPoolExecutor`` with a lock per object.

What most people would write to take API calls off the scheduling thread: submit every call as
a task to a thread pool; a task takes its object's lock (so two calls for one pod never run at
the same time), computes the request against the pod the caller passed, skips it if nothing
differs, waits for the shared client rate limiter and sends it. Tasks run in submission order
(the pool's FIFO work queue); nothing is merged, nothing is prioritised, locks are never
reclaimed. Benchmark-only code.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.baselines.base import Cond, DirectRequests, OutcomeFuture, resolved
from kdispatch import ApiBackend, DispatcherClosed, Obj, Outcome


class ThreadPoolContender:
    """``submit_*`` queue a task on the pool and return its future."""

    name = "threadpool"

    def __init__(self, backend: ApiBackend, qps: float, burst: int, workers: int) -> None:
        self._requests = DirectRequests(backend, qps, burst)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bench-pool")
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._closed = False

    def _lock(self, uid: str) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(uid)
            if lock is None:
                lock = self._locks[uid] = threading.Lock()
            return lock

    def submit_status(self, pod: Obj, cond: Cond) -> OutcomeFuture:
        """Caller thread; returns at once."""
        if self._closed:
            return resolved(error=DispatcherClosed("stopped"))
        return self._pool.submit(self._status, pod, cond)

    def submit_binding(self, pod: Obj, node: str) -> OutcomeFuture:
        """Caller thread; returns at once."""
        if self._closed:
            return resolved(error=DispatcherClosed("stopped"))
        return self._pool.submit(self._binding, pod, node)

    def _status(self, pod: Obj, cond: Cond) -> Outcome:
        """Pool thread."""
        with self._lock(pod["metadata"]["uid"]):
            return self._requests.status(pod, cond)

    def _binding(self, pod: Obj, node: str) -> Outcome:
        """Pool thread."""
        with self._lock(pod["metadata"]["uid"]):
            return self._requests.binding(pod, node)

    def observe(self, pod: Obj) -> None:
        """Nothing to do: each task uses the pod its caller passed."""

    def stop(self, drain: bool = True, timeout: float = 30.0) -> None:
        """Caller thread. Without ``drain``, queued tasks are cancelled; running ones finish."""
        del timeout  # ThreadPoolExecutor.shutdown has no deadline
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=not drain)

    def stats(self) -> dict[str, Any]:
        """Requests sent, no-ops skipped, locks held."""
        return {**self._requests.stats(), "locks": len(self._locks)}
