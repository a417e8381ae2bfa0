"""Baseline ``blocking``: the caller makes each API call itself.

What a scheduler did before KEP-5229 for an unschedulable pod's status: compute the patch
against its own (informer) view of the pod, skip it when nothing differs, wait for the shared
client rate limiter and send the request — all on the calling (scheduling) thread. No queue, no
merging, no priority: the caller simply waits. Benchmark-only code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.baselines.base import Cond, DirectRequests, OutcomeFuture, resolved
from kdispatch import ApiBackend, Obj, Outcome


class BlockingContender:
    """Every ``submit_*`` runs the request on the caller's thread and returns a resolved future."""

    name = "blocking"

    def __init__(self, backend: ApiBackend, qps: float, burst: int) -> None:
        self._requests = DirectRequests(backend, qps, burst)

    def submit_status(self, pod: Obj, cond: Cond) -> OutcomeFuture:
        """Caller thread; blocks for the rate limiter and the request."""
        return _inline(lambda: self._requests.status(pod, cond))

    def submit_binding(self, pod: Obj, node: str) -> OutcomeFuture:
        """Caller thread; blocks for the rate limiter and the request."""
        return _inline(lambda: self._requests.binding(pod, node))

    def observe(self, pod: Obj) -> None:
        """Nothing to do: the caller passes its newest view with every call."""

    def stop(self, drain: bool = True, timeout: float = 30.0) -> None:
        """Nothing runs in the background."""

    def stats(self) -> dict[str, Any]:
        """Requests sent and calls skipped as no-ops."""
        return self._requests.stats()


def _inline(request: Callable[[], Outcome]) -> OutcomeFuture:
    """Caller thread: run ``request``; its outcome (or error) as a resolved future."""
    try:
        outcome = request()
    except Exception as exc:
        return resolved(error=exc)
    return resolved(outcome)
