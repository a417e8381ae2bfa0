"""Benchmark-only baselines the dispatcher is measured against, all behind the same tiny adapter
(:class:`~benchmarks.baselines.base.Contender`):

* :mod:`~benchmarks.baselines.blocking` — the caller makes each API call itself;
* :mod:`~benchmarks.baselines.threadpool` — a thread pool with a lock per object;
* :mod:`~benchmarks.baselines.upstream_fifo` — a model of kube-scheduler's ``APIDispatcher``.

None of this is part of the library.
"""

from benchmarks.baselines.base import ClientRateLimiter, Cond, Contender, OutcomeFuture
from benchmarks.baselines.blocking import BlockingContender
from benchmarks.baselines.threadpool import ThreadPoolContender
from benchmarks.baselines.upstream_fifo import UpstreamFifoContender

__all__ = [
    "BlockingContender",
    "ClientRateLimiter",
    "Cond",
    "Contender",
    "OutcomeFuture",
    "ThreadPoolContender",
    "UpstreamFifoContender",
]
