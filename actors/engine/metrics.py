"""Prometheus metrics of one dispatcher (the names and labels are listed on the docs' page
"Metrics and logs"): upstream's three names (KEP-5229) under ``prefix``, and kdispatch's own.
The registry is injectable, private by default; one running dispatcher per registry
(:class:`MetricsRegistryInUse`). Thread-safe: called from pool threads, executor workers and
callers; the hot families keep per-thread numbers (``runtime.metric_families``).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from kdispatch.actors.model.config import UPSTREAM_METRICS_PREFIX, check_metrics_prefix
from kdispatch.actors.model.errors import InvalidConfigError
from kdispatch.actors.runtime.metric_families import (
    CounterFamily,
    GaugeFamily,
    HistogramCounts,
    HistogramFamily,
    Shards,
)

DURATION_BUCKETS = tuple(0.001 * 2**k for k in range(15))
"""1 ms x 2^k, k = 0..14 (as upstream)."""


def _result(outcome: str) -> str:
    """Upstream's ``result`` label of an attempt's ``outcome``: success or error."""
    return "success" if outcome == "success" else "error"


class MetricsRegistryInUse(InvalidConfigError):
    """The metrics registry already holds these metrics: a running dispatcher's (stop it, or
    give each dispatcher its own registry), or other collectors of the same names."""


# registry -> the Metrics whose collectors it holds
_owners: weakref.WeakKeyDictionary[CollectorRegistry, Metrics] = weakref.WeakKeyDictionary()
_owners_lock = threading.Lock()


class Metrics:
    """All metrics of one dispatcher. Runs on any thread."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, prefix: str = UPSTREAM_METRICS_PREFIX
    ) -> None:
        """Build the collectors and register them. Raises :class:`MetricsRegistryInUse` or
        :class:`InvalidConfigError` (bad ``prefix``)."""
        if registry is not None and not isinstance(registry, CollectorRegistry):
            raise InvalidConfigError(
                f"metrics registry must be a prometheus_client CollectorRegistry, got "
                f"{type(registry).__name__}"
            )
        self.prefix = check_metrics_prefix(prefix)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.executions_total_name = f"{prefix}_async_api_call_execution_total"
        # per-thread numbers for the families updated on every call (see .metric_families)
        shards = self._shards = Shards()
        self.pending = GaugeFamily(
            f"{prefix}_pending_async_api_calls",
            "Calls queued in the dispatcher and not yet sent, by call type.",
            ["call_type"],
            shards,
        )
        # kept by (call_type, outcome); shown by (call_type, result); counted by executions
        self.duration = HistogramFamily(
            f"{prefix}_async_api_call_execution_duration_seconds",
            "Duration of attempts sent to the apiserver, by call type and result.",
            ["call_type", "result"],
            shards,
            DURATION_BUCKETS,
            relabel=lambda kept: (kept[0], _result(kept[1])),
        )
        self.executions = HistogramCounts(
            self.executions_total_name,
            "Attempts sent to the apiserver, by call type, result (success or error, as "
            "upstream) and outcome (success, retry, conflict, not_found, failed).",
            ["call_type", "result", "outcome"],
            self.duration,
            relabel=lambda kept: (kept[0], _result(kept[1]), kept[1]),
        )
        self.outcomes = CounterFamily(
            "kdispatch_call_outcomes_total",
            "Calls resolved, by call type and outcome (success, skipped, overwritten, "
            "cancelled, conflict, stale, not_found, failed, closed).",
            ["call_type", "outcome"],
            shards,
        )
        self.merged = CounterFamily(
            "kdispatch_calls_merged_total",
            "Pending calls merged with a newer call of the same type.",
            ["call_type"],
            shards,
        )
        self.retries = CounterFamily(
            "kdispatch_retries_total",
            "Attempts retried, by call type and reason (429, 5xx, timeout, connection, "
            "bad_response, conflict).",
            ["call_type", "reason"],
            shards,
        )
        self.limiter_wait = HistogramFamily(
            "kdispatch_rate_limiter_wait_seconds",
            "Time a ready object queued in the executor lanes waited for its grant (one "
            "granted at once, nothing queued and a token and a worker free, is not counted).",
            ["lane"],
            shards,
            DURATION_BUCKETS,
        )
        self.live_actors = Gauge(
            "kdispatch_live_object_actors", "Object actors currently alive.", registry=None
        )
        self.dropped = Gauge(
            "kdispatch_dropped_messages",
            "Messages dropped because their object was deleted (tombstoned) or untracked.",
            registry=None,
        )
        self.actor_failures = CounterFamily(
            "kdispatch_object_actor_failures_total",
            "Object actors that crashed (their futures failed, the actor was restarted clean).",
            [],
            shards,
        )
        self.requests = CounterFamily(
            "kdispatch_requests_total",
            "Requests sent to the apiserver (each took a rate-limiter token), by call type and "
            "verb; a call's follow-up GET, re-read or second request counts too.",
            ["call_type", "verb"],
            shards,
        )
        self.held = GaugeFamily(
            "kdispatch_held_calls",
            "Calls admitted with prerequisites (after=) that are not released yet, by call type.",
            ["call_type"],
            shards,
        )
        self.groups_open = GaugeFamily(
            "kdispatch_call_groups_open",
            "Call groups created and not yet resolved.",
            [],
            shards,
        )
        self.groups_cancelled = CounterFamily(
            "kdispatch_call_groups_cancelled_total",
            "Call groups cancelled, by cause (caller, owner_deleted, owner_preempted, "
            "owner_not_found, owner_withdrawn, member_failed, stopped).",
            ["cause"],
            shards,
        )
        self.events_dropped = CounterFamily(
            "kdispatch_events_dropped_total",
            "Best-effort calls (Events) dropped unsent, by reason (queue_full: "
            "events_max_pending already waited; throttled: a follow-up request without a "
            "spare token of a shared bucket).",
            ["reason"],
            shards,
        )
        self._collectors: tuple[Collector, ...] = (
            self.events_dropped,
            self.pending,
            self.requests,
            self.executions,
            self.duration,
            self.outcomes,
            self.merged,
            self.retries,
            self.limiter_wait,
            self.live_actors,
            self.dropped,
            self.actor_failures,
            self.held,
            self.groups_open,
            self.groups_cancelled,
        )
        self._released = False
        self._register()

    def _register(self) -> None:
        registry = self.registry
        with _owners_lock:
            owner = _owners.get(registry)
            if owner is not None and not owner._released:
                raise MetricsRegistryInUse(
                    "this metrics registry already holds the metrics of a dispatcher that has "
                    "not been stopped; stop it first, or give each dispatcher its own registry "
                    "(metrics_registry=)"
                )
            if owner is not None:
                owner._unregister()
            done: list[Collector] = []
            try:
                for collector in self._collectors:
                    registry.register(collector)
                    done.append(collector)
            except ValueError as exc:  # prometheus_client: "Duplicated timeseries ..."
                for collector in done:
                    registry.unregister(collector)
                raise MetricsRegistryInUse(f"metrics registry conflict: {exc}") from None
            _owners[registry] = self

    def _unregister(self) -> None:
        """Under ``_owners_lock``: take this dispatcher's collectors out of the registry."""
        for collector in self._collectors:
            with contextlib.suppress(KeyError):  # unregistered by the user meanwhile
                self.registry.unregister(collector)

    def release(self) -> None:
        """Caller thread (``Dispatcher.stop``). The collectors stay registered until another
        dispatcher takes the registry over."""
        with _owners_lock:
            self._released = True

    def outcome(self, call_type: str, outcome: str, count: int = 1) -> None:
        """A call (or ``count`` calls) resolved."""
        numbers = self._shards.mine()
        key = (self.outcomes, call_type, outcome)
        numbers[key] = numbers.get(key, 0) + count

    def merge(self, call_type: str) -> None:
        """A pending call was merged with a newer one."""
        self.merged.add((call_type,))

    def pending_delta(self, call_type: str, delta: int) -> None:
        """The pending-calls gauge of ``call_type`` moves by ``delta``."""
        self.pending.add((call_type,), delta)

    def held_delta(self, call_type: str, delta: int) -> None:
        """The held-calls gauge of ``call_type`` moves by ``delta``."""
        self.held.add((call_type,), delta)

    def groups_open_delta(self, delta: int) -> None:
        """The open-groups gauge moves by ``delta``."""
        self.groups_open.add((), delta)

    def group_cancelled(self, cause: str) -> None:
        """A call group was cancelled (``cause``: its label)."""
        self.groups_cancelled.add((cause,))

    def retry(self, call_type: str, reason: str) -> None:
        """An attempt will be retried."""
        self.retries.add((call_type, reason))

    def request(self, call_type: str, verb: str) -> None:
        """One request is being sent."""
        self.requests.add((call_type, verb))

    def sent(self, call_type: str, verb: str | None, outcome: str, seconds: float | None) -> None:
        """One request of ``verb`` ended (None: none was sent); with ``seconds``, a call's
        attempt that ended with ``outcome``: request, execution and duration in one step."""
        numbers = self._shards.mine()
        if verb is not None:
            request = (self.requests, call_type, verb)
            numbers[request] = numbers.get(request, 0) + 1
        if seconds is not None:  # the duration, kept by outcome: the execution count too
            duration = self.duration
            key = (duration, call_type, outcome)
            row = numbers.get(key)
            if row is None:
                row = numbers[key] = duration.empty_row()
            row[bisect_left(duration.bounds, seconds)] += 1.0  # HistogramFamily's row layout
            row[-1] += seconds

    def event_dropped(self, reason: str) -> None:
        """A best-effort call was dropped unsent."""
        self.events_dropped.add((reason,))

    def waited(self, lane: int, seconds: float) -> None:
        """An object waited ``seconds`` in lane ``lane`` before its grant."""
        self.limiter_wait.observe((str(lane),), seconds)

    def actor_failed(self) -> None:
        """An object actor crashed."""
        self.actor_failures.add(())

    def bind_live(self, live: Callable[[], int], dropped: Callable[[], int]) -> None:
        """Make the live-actor and dropped gauges read the registry on scrape."""
        self.live_actors.set_function(live)
        self.dropped.set_function(dropped)

    @staticmethod
    def samples(*collectors: Collector) -> Iterator[Sample]:
        """Every sample of ``collectors``, read from the collectors, not the registry."""
        for collector in collectors:
            for family in collector.collect():
                yield from family.samples

    def value(self, name: str, **labels: str) -> float:
        """Current value of one sample of this dispatcher (0.0 if absent)."""
        for sample in self.samples(*self._collectors):
            if sample.name == name and sample.labels == labels:
                return sample.value
        return 0.0
