"""The contenders of every workload: kdispatch's :class:`~kdispatch.Dispatcher`
and the
three baselines, built with the same backend, rate limit and request parallelism.

Benchmark-only code.
"""

from __future__ import annotations

from typing import Any

from benchmarks.baselines import (
    BlockingContender,
    Cond,
    Contender,
    OutcomeFuture,
    ThreadPoolContender,
    UpstreamFifoContender,
)
from kdispatch import (
    ApiBackend,
    Call,
    Dispatcher,
    DispatcherConfig,
    ExecutorConfig,
    Obj,
    PodBinding,
    PodStatusPatch,
    RateLimitConfig,
)

KDISPATCH = "kdispatch"
CONTENDERS: tuple[str, ...] = (KDISPATCH, "upstream_fifo", "threadpool", "blocking")
"""Every contender, kdispatch first."""

WORKERS = 16
"""Request parallelism of every contender: kube-scheduler's default ``parallelism`` (the
``APIDispatcher``'s goroutine limit), also the thread pool's size and kdispatch's executor
workers."""


class KdispatchContender:
    """The library under test behind the common adapter; methods run on the caller's thread
    and never block on the apiserver."""

    name = KDISPATCH

    def __init__(self, backend: ApiBackend, qps: float, burst: int, workers: int) -> None:
        config = DispatcherConfig(
            rate_limit=RateLimitConfig(qps=qps, burst=burst),
            executor=ExecutorConfig(workers=workers),
        )
        self.dispatcher = Dispatcher(backend, config).start()

    def submit_status(self, pod: Obj, cond: Cond) -> OutcomeFuture:
        """Submit a ``pod_status_patch`` for ``pod``."""
        return self.dispatcher.submit(PodStatusPatch.for_pod(pod, conditions=[cond]))

    def submit_binding(self, pod: Obj, node: str) -> OutcomeFuture:
        """Submit a ``pod_binding`` of ``pod`` to ``node``."""
        return self.dispatcher.submit(PodBinding.for_pod(pod, node))

    def submit_call(self, call: Call) -> OutcomeFuture:
        """Submit a call built beforehand (W1 times the submission alone)."""
        return self.dispatcher.submit(call)

    def observe(self, pod: Obj) -> None:
        """Informer thread: the pod's newest state."""
        self.dispatcher.on_update(pod)

    def stop(self, drain: bool = True, timeout: float = 30.0) -> None:
        """Stop the dispatcher (drains pending calls first when ``drain``)."""
        self.dispatcher.stop(drain=drain, timeout=timeout)

    def stats(self) -> dict[str, Any]:
        """The dispatcher's own counters."""
        return self.dispatcher.stats()


def make_contender(
    name: str, backend: ApiBackend, *, qps: float, burst: int = 100, workers: int = WORKERS
) -> Contender:
    """Build contender ``name`` on ``backend`` with the given client rate limit."""
    if name == KDISPATCH:
        return KdispatchContender(backend, qps, burst, workers)
    if name == "upstream_fifo":
        return UpstreamFifoContender(backend, qps, burst, workers)
    if name == "threadpool":
        return ThreadPoolContender(backend, qps, burst, workers)
    if name == "blocking":
        return BlockingContender(backend, qps, burst)
    raise ValueError(f"unknown contender {name!r}: want one of {CONTENDERS}")
