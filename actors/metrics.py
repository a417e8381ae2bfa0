"""Prometheus metrics of one dispatcher.

The three upstream names (KEP-5229) are kept so existing dashboards work; kdispatch adds actor,
outcome, retry and limiter metrics. The registry is injectable: by default every dispatcher gets
a private :class:`prometheus_client.CollectorRegistry` (so several dispatchers in one process do
not clash); pass ``prometheus_client.REGISTRY`` to expose them with the default exporter.

Thread-safe: methods are called from pool threads, executor workers and callers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

DURATION_BUCKETS = tuple(0.001 * 2**k for k in range(15))
"""1 ms x 2^k, k = 0..14 (as upstream)."""


class Metrics:
    """All metrics of one dispatcher. Runs on any thread."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.pending = Gauge(
            "scheduler_pending_async_api_calls",
            "Calls queued in the dispatcher and not yet sent, by call type.",
            ["call_type"],
            registry=r,
        )
        self.executions = Counter(
            "scheduler_async_api_call_execution_total",
            "Attempts sent to the apiserver, by call type and result.",
            ["call_type", "result"],
            registry=r,
        )
        self.duration = Histogram(
            "scheduler_async_api_call_execution_duration_seconds",
            "Duration of attempts sent to the apiserver, by call type and result.",
            ["call_type", "result"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.outcomes = Counter(
            "kdispatch_call_outcomes_total",
            "Calls resolved, by call type and outcome (success, skipped, overwritten, "
            "cancelled, conflict, not_found, failed, closed).",
            ["call_type", "outcome"],
            registry=r,
        )
        self.merged = Counter(
            "kdispatch_calls_merged_total",
            "Pending calls merged with a newer call of the same type.",
            ["call_type"],
            registry=r,
        )
        self.retries = Counter(
            "kdispatch_retries_total",
            "Attempts retried, by call type and reason (429, 5xx, timeout, connection, conflict).",
            ["call_type", "reason"],
            registry=r,
        )
        self.limiter_wait = Histogram(
            "kdispatch_rate_limiter_wait_seconds",
            "Time a ready object waited in the executor lanes before it was sent.",
            ["lane"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "kdispatch_requests_total",
            "Requests sent to the apiserver (each took a rate-limiter token), by call type and "
            "verb; a call's follow-up GET, re-read or second request counts too.",
            ["call_type", "verb"],
            registry=r,
        )
        self.live_actors = Gauge(
            "kdispatch_live_object_actors", "Object actors currently alive.", registry=r
        )
        self.dropped = Gauge(
            "kdispatch_dropped_messages",
            "Messages dropped because their object was deleted (tombstoned) or untracked.",
            registry=r,
        )
        self.actor_failures = Counter(
            "kdispatch_object_actor_failures_total",
            "Object actors that crashed (their futures failed, the actor was restarted clean).",
            registry=r,
        )

        self._children: dict[tuple[str, ...], Any] = {}

    # Labelled children are cached: ``labels()`` takes a lock and builds a key on every call,
    # which is most of the cost of a metric update on the hot path.

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric._name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def outcome(self, call_type: str, outcome: str) -> None:
        """A call resolved."""
        self._child(self.outcomes, call_type, outcome).inc()

    def merge(self, call_type: str) -> None:
        """A pending call was merged with a newer one."""
        self._child(self.merged, call_type).inc()

    def pending_delta(self, call_type: str, delta: int) -> None:
        """The pending-calls gauge of ``call_type`` moves by ``delta``."""
        self._child(self.pending, call_type).inc(delta)

    def retry(self, call_type: str, reason: str) -> None:
        """An attempt will be retried."""
        self._child(self.retries, call_type, reason).inc()

    def request(self, call_type: str, verb: str) -> None:
        """One request is being sent."""
        self._child(self.requests, call_type, verb).inc()

    def executed(self, call_type: str, result: str, seconds: float) -> None:
        """An attempt finished."""
        self._child(self.executions, call_type, result).inc()
        self._child(self.duration, call_type, result).observe(seconds)

    def waited(self, lane: int, seconds: float) -> None:
        """An object waited ``seconds`` in lane ``lane`` before its grant."""
        self._child(self.limiter_wait, str(lane)).observe(seconds)

    def bind_live(self, live: Callable[[], int], dropped: Callable[[], int]) -> None:
        """Make the live-actor and dropped gauges read the registry on scrape."""
        self.live_actors.set_function(live)
        self.dropped.set_function(dropped)

    def value(self, name: str, **labels: str) -> float:
        """Current value of one sample (0.0 if absent). For stats and tests."""
        v = self.registry.get_sample_value(name, labels)
        return 0.0 if v is None else v
