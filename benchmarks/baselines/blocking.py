"""Baseline ``blocking``: the caller makes each API call itself.

What a scheduler did before KEP-5229 for an unschedulable pod's status: compute the patch
against its own (informer) view of the pod, skip it when nothing differs, wait for the shared
client rate limiter and send the request — all on the calling (scheduling) thread. No queue, no
merging, no priority: the caller simply waits. Benchmark-only code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.baselines.base import (
    ClientRateLimiter,
    Cond,
    OutcomeFuture,
    resolved,
    send_binding,
    send_status,
    status_body,
)
from kdispatch import ApiBackend, Obj, Outcome


class BlockingContender:
    """Every ``submit_*`` runs the request on the caller's thread and returns a resolved future."""

    name = "blocking"

    def __init__(self, backend: ApiBackend, qps: float, burst: int) -> None:
        self._backend = backend
        self._limiter = ClientRateLimiter(qps, burst)
        self._sent = 0
        self._skipped = 0

    def submit_status(self, pod: Obj, cond: Cond) -> OutcomeFuture:
        """Caller thread; blocks for the rate limiter and the request."""
        body = status_body(pod, cond)
        if body is None:
            self._skipped += 1
            return resolved(Outcome.SKIPPED)
        return self._send(lambda: send_status(self._backend, pod, body))

    def submit_binding(self, pod: Obj, node: str) -> OutcomeFuture:
        """Caller thread; blocks for the rate limiter and the request."""
        return self._send(lambda: send_binding(self._backend, pod, node))

    def _send(self, request: Callable[[], None]) -> OutcomeFuture:
        """Caller thread: wait for a token, run ``request``; its outcome as a resolved future."""
        self._limiter.wait()
        self._sent += 1
        try:
            request()
        except Exception as exc:
            return resolved(error=exc)
        return resolved(Outcome.SUCCESS)

    def observe(self, pod: Obj) -> None:
        """Nothing to do: the caller passes its newest view with every call."""

    def stop(self, drain: bool = True, timeout: float = 30.0) -> None:
        """Nothing runs in the background."""

    def stats(self) -> dict[str, Any]:
        """Requests sent and calls skipped as no-ops."""
        return {"sent": self._sent, "skipped": self._skipped, "tokens_taken": self._limiter.taken}
