"""What every contender of the benchmarks shares: the adapter protocol, the client-side rate
limiter the baselines wait on, and the request each contender sends.

Benchmark-only code. The adapter is deliberately tiny — ``submit_status(pod, cond)``,
``submit_binding(pod, node)``, ``observe(pod)``, ``stop()`` — so every contender runs the very
same workload against the very same backend. Every ``submit_*`` returns a
:class:`concurrent.futures.Future` resolving to an :class:`~kdispatch.Outcome` (or
raising),
already resolved for the blocking contender.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Protocol

from kdispatch import ApiBackend, Obj, Outcome, PodStatusPatch

Cond = Mapping[str, str]
"""A pod condition intent: ``type``, ``status`` and optionally ``reason``/``message``."""

OutcomeFuture = Future[Outcome]


class Contender(Protocol):
    """One way of making the scheduler's API calls. Every method may be called from any thread
    (the workloads call ``submit_*`` from one scheduler thread and ``observe`` from an informer
    thread)."""

    name: str

    def submit_status(self, pod: Obj, cond: Cond) -> OutcomeFuture:
        """Patch ``pod``'s status so that condition ``cond`` holds."""
        ...

    def submit_binding(self, pod: Obj, node: str) -> OutcomeFuture:
        """Bind ``pod`` to ``node``."""
        ...

    def observe(self, pod: Obj) -> None:
        """An informer saw a newer version of ``pod`` (ignored by contenders without a cache)."""
        ...

    def stop(self, drain: bool = True, timeout: float = 30.0) -> None:
        """Stop accepting calls; with ``drain``, finish queued calls first (up to ``timeout``)."""
        ...

    def stats(self) -> dict[str, Any]:
        """Contender-specific counters for the report."""
        ...


class ClientRateLimiter:
    """A blocking token bucket with reservations, as client-go's ``tokenBucketRateLimiter``
    (``golang.org/x/time/rate``): ``wait()`` reserves the next token — the bucket may go
    negative — and sleeps until the reservation is due, so waiters are served in the order they
    asked and every waiter holds its thread (a goroutine upstream) while it waits.


    Same ``qps``/``burst`` semantics as :class:`kdispatch.TokenBucket`: ``burst``
    tokens
    stored at most, ``qps`` tokens per second; ``qps=math.inf`` never waits. Thread-safe.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._qps = float(qps)
        self._burst = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = clock()
        self.taken = 0

    def reserve(self) -> float:
        """Any thread. Take one token (possibly in advance); return seconds until it is due."""
        with self._lock:
            self.taken += 1
            if math.isinf(self._qps):
                return 0.0
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    def wait(self) -> None:
        """Calling thread: block until a token is ours."""
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)


def status_body(pod: Obj, cond: Cond) -> dict[str, Any] | None:
    """The strategic-merge ``pods/status`` body that makes ``cond`` hold on ``pod`` (the
    caller's view), or None when ``pod`` already satisfies it. Computed by the same pure call
    class the dispatcher sends, so every contender sends byte-for-byte the same request."""
    return PodStatusPatch.for_pod(pod, conditions=[cond]).status_patch(pod)


def send_status(backend: ApiBackend, pod: Obj, body: dict[str, Any]) -> None:
    """Request thread. ``PATCH pods/status`` with a UID precondition only, as kube-scheduler's
    ``util.PatchPodStatus`` does (it sends no resourceVersion)."""
    meta = pod["metadata"]
    backend.patch_status(
        "Pod",
        meta["namespace"],
        meta["name"],
        {"status": body},
        uid=meta["uid"],
        resource_version=None,
        patch_type="strategic",
    )


def send_binding(backend: ApiBackend, pod: Obj, node: str) -> None:
    """Request thread. ``POST pods/binding``."""
    meta = pod["metadata"]
    backend.bind(meta["namespace"], meta["name"], uid=meta["uid"], node=node)


class DirectRequests:
    """The requests the ``blocking`` and ``threadpool`` baselines make themselves, on the
    calling thread: a status patch computed against the pod the caller passed (skipped when
    nothing differs) and a binding, each after a token of the shared client rate limiter.
    Counts what it sent and skipped. Any thread; blocks for the token and the request."""

    def __init__(self, backend: ApiBackend, qps: float, burst: int) -> None:
        self._backend = backend
        self.limiter = ClientRateLimiter(qps, burst)
        self._lock = threading.Lock()
        self._sent = 0
        self._skipped = 0

    def status(self, pod: Obj, cond: Cond) -> Outcome:
        """Make ``cond`` hold on ``pod``: ``SKIPPED`` when it does already."""
        body = status_body(pod, cond)
        if body is None:
            with self._lock:
                self._skipped += 1
            return Outcome.SKIPPED
        self._take_token()
        send_status(self._backend, pod, body)
        return Outcome.SUCCESS

    def binding(self, pod: Obj, node: str) -> Outcome:
        """Bind ``pod`` to ``node``."""
        self._take_token()
        send_binding(self._backend, pod, node)
        return Outcome.SUCCESS

    def stats(self) -> dict[str, Any]:
        """Requests sent, calls skipped as no-ops, tokens taken."""
        return {"sent": self._sent, "skipped": self._skipped, "tokens_taken": self.limiter.taken}

    def _take_token(self) -> None:
        self.limiter.wait()
        with self._lock:
            self._sent += 1


def resolved(outcome: Outcome | None = None, error: BaseException | None = None) -> OutcomeFuture:
    """A future that is already resolved (the blocking contender's return value)."""
    fut: OutcomeFuture = Future()
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(outcome if outcome is not None else Outcome.SUCCESS)
    return fut


def settle(
    fut: OutcomeFuture, outcome: Outcome | None = None, error: BaseException | None = None
) -> bool:
    """Resolve ``fut`` unless it already is (upstream sends results on a buffered channel with a
    non-blocking send, so a second result for the same call is dropped). Any thread."""
    if fut.done():
        return False
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(outcome if outcome is not None else Outcome.SUCCESS)
    except Exception:  # InvalidStateError: lost a race with another resolver
        return False
    return True
