"""Metrics: upstream label values, the prefix option, one dispatcher per registry at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kdispatch.actors.engine.metrics import Metrics, MetricsRegistryInUse
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import DispatcherConfig, RateLimitConfig
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallStale,
    DispatcherClosed,
    InvalidConfigError,
    Outcome,
)
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.actors.runtime import metric_families
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from kdispatch.testing.waiting import wait_for
from tests.clocks import ManualClock
from tests.configs import FAST
from tests.factories import cond

pytestmark = pytest.mark.timeout(60)


def test_result_is_success_or_error_and_the_finer_outcome_has_its_own_label() -> None:
    server = InMemoryApiServer()
    registry = CollectorRegistry()
    pod = server.create(make_pod("p1"))
    server.script("patch_status", "500")  # one retryable failure, then success
    with Dispatcher(server, FAST, metrics_registry=registry) as d:
        d.submit(PodStatusPatch.for_pod(pod, conditions=[cond()])).result(timeout=10)
    samples = {
        (s.labels["result"], s.labels["outcome"]): s.value
        for family in registry.collect()
        if family.name == "scheduler_async_api_call_execution"
        for s in family.samples
        if s.name.endswith("_total")
    }
    assert samples == {("error", "retry"): 1.0, ("success", "success"): 1.0}
    results = {
        s.labels["result"]
        for family in registry.collect()
        if family.name == "scheduler_async_api_call_execution_duration_seconds"
        for s in family.samples
    }
    assert results == {"success", "error"}


def test_prefix_renames_the_upstream_metrics_only() -> None:
    server = InMemoryApiServer()
    registry = CollectorRegistry()
    pod = server.create(make_pod("p1"))
    config = DispatcherConfig(rate_limit=FAST.rate_limit, metrics_prefix="quota_controller")
    with Dispatcher(server, config, metrics_registry=registry) as d:
        d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10)
        assert d.stats()["sent"] == {"pod_binding": 1}
    names = {family.name for family in registry.collect()}
    assert {
        "quota_controller_pending_async_api_calls",
        "quota_controller_async_api_call_execution",
        "quota_controller_async_api_call_execution_duration_seconds",
        "kdispatch_call_outcomes",
    } <= names
    assert not any(name.startswith("scheduler_") for name in names)
    assert (
        registry.get_sample_value(
            "quota_controller_async_api_call_execution_total",
            {"call_type": "pod_binding", "result": "success", "outcome": "success"},
        )
        == 1
    )


@pytest.mark.parametrize("prefix", ["", "has space", "9lives", "trailing_", 7, None])
def test_bad_prefix_is_a_config_error(prefix: object) -> None:
    with pytest.raises(InvalidConfigError, match="metrics_prefix"):
        DispatcherConfig(metrics_prefix=prefix)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError):
        Metrics(prefix=prefix)  # type: ignore[arg-type]


def test_a_second_running_dispatcher_on_one_registry_is_refused() -> None:
    registry = CollectorRegistry()
    server = InMemoryApiServer()
    with (
        Dispatcher(server, FAST, metrics_registry=registry),
        pytest.raises(MetricsRegistryInUse, match="not been stopped"),
    ):
        Dispatcher(server, FAST, metrics_registry=registry)


def test_after_stop_a_new_dispatcher_takes_the_registry_over() -> None:
    registry = CollectorRegistry()
    server = InMemoryApiServer()
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, FAST, metrics_registry=registry) as first:
        first.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10)
    key = {"call_type": "pod_binding", "result": "success", "outcome": "success"}
    name = "scheduler_async_api_call_execution_total"
    assert registry.get_sample_value(name, key) == 1  # still readable after stop
    second = Dispatcher(server, FAST, metrics_registry=registry)
    assert registry.get_sample_value(name, key) is None  # the new dispatcher counts from zero
    assert first.stats()["sent"] == {"pod_binding": 1}  # the stopped one keeps its figures
    assert second.stats()["sent"] == {}
    second.stop()


def test_foreign_collectors_of_the_same_name_leave_nothing_half_registered() -> None:
    registry = CollectorRegistry()
    Counter("kdispatch_retries", "someone else's", registry=registry)
    before = {family.name for family in registry.collect()}
    with pytest.raises(MetricsRegistryInUse, match="conflict"):
        Metrics(registry)
    assert {family.name for family in registry.collect()} == before


def test_stop_takes_the_calls_it_closes_out_of_the_pending_gauge() -> None:
    """stop(drain=False) resolves the queued calls DispatcherClosed: none is pending after it."""
    server = InMemoryApiServer()
    registry = CollectorRegistry()
    pods = [server.create(make_pod(f"p{i}")) for i in range(20)]
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=1.0, burst=2))
    clock = ManualClock(1000.0)  # stands still: no token after the burst
    d = Dispatcher(server, config, metrics_registry=registry, clock=clock).start()
    futures = [d.submit(PodBinding.for_pod(pod, "n1")) for pod in pods]
    labels = {"call_type": "pod_binding"}
    wait_for(  # two sent (the burst), the rest queued on their actors
        lambda: registry.get_sample_value("scheduler_pending_async_api_calls", labels) == 18.0,
        10,
        "18 bindings pending",
    )
    d.stop(drain=False)
    closed = sum(isinstance(f.exception(timeout=10), DispatcherClosed) for f in futures)
    assert closed > 0
    assert d.stats()["outcomes"]["pod_binding:closed"] == closed
    assert registry.get_sample_value("scheduler_pending_async_api_calls", labels) == 0.0


def test_a_call_merged_into_a_pending_one_is_counted_and_leaves_one_pending() -> None:
    """``kdispatch_calls_merged_total`` counts a call merged into a pending one; the pending
    gauge counts the one call left."""
    server = InMemoryApiServer()
    registry = CollectorRegistry()
    a, b = server.create(make_pod("a")), server.create(make_pod("b"))
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=1.0, burst=1))
    clock = ManualClock(1000.0)  # stands still: b's calls wait for a token that never comes
    d = Dispatcher(server, config, metrics_registry=registry, clock=clock).start()
    try:
        assert d.submit(PodBinding.for_pod(a, "n1")).result(timeout=10) is Outcome.SUCCESS
        first = d.submit(PodStatusPatch.for_pod(b, conditions=[cond()]))
        d.submit(PodStatusPatch.for_pod(b, nominated_node_name="n1"))
        assert d.view(b["metadata"]["uid"]) is not None  # both submits handled
        assert first.result(timeout=10) is Outcome.OVERWRITTEN
        labels = {"call_type": "pod_status_patch"}
        assert registry.get_sample_value("kdispatch_calls_merged_total", labels) == 1.0
        assert registry.get_sample_value("scheduler_pending_async_api_calls", labels) == 1.0
    finally:
        d.stop(drain=False, timeout=10)
    assert [r.name for r in server.request_log] == ["a"]


def test_informer_events_for_untracked_and_deleted_objects_are_dropped_and_counted(
    server: InMemoryApiServer,
) -> None:
    """``kdispatch_dropped_messages``: an event for an object with no call, and late events for
    one deleted (tombstoned), which they do not bring back: a later call is cancelled."""
    registry = CollectorRegistry()
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, FAST, metrics_registry=registry) as d:
        d.on_update(pod)  # untracked
        d.on_delete(pod)  # untracked too; tombstoned from now on
        assert registry.get_sample_value("kdispatch_dropped_messages") == 2.0
        d.on_update(pod)
        d.on_add(pod)
        assert registry.get_sample_value("kdispatch_dropped_messages") == 4.0
        assert d.live_actors == 0
        late = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        assert isinstance(late.exception(timeout=10), CallCancelled)
    assert server.request_log == []


def test_a_stale_call_is_counted_with_the_outcome_its_help_names() -> None:
    server = InMemoryApiServer()
    registry = CollectorRegistry()
    pod = server.create(make_pod("p1"))
    server.bind("default", "p1", uid=pod["metadata"]["uid"], node="n1")
    late = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    with Dispatcher(server, FAST, metrics_registry=registry) as d, pytest.raises(CallStale):
        d.submit(PodStatusPatch.for_pod(pod, conditions=[late])).result(timeout=10)
    labels = {"call_type": "pod_status_patch", "outcome": "stale"}
    assert registry.get_sample_value("kdispatch_call_outcomes_total", labels) == 1.0
    [family] = [f for f in registry.collect() if f.name == "kdispatch_call_outcomes"]
    assert "stale" in family.documentation


def test_bad_registry_is_a_config_error() -> None:
    with pytest.raises(InvalidConfigError, match="CollectorRegistry"):
        Metrics("REGISTRY")  # type: ignore[arg-type]


def _samples(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Every sample but prometheus_client's ``_created`` timestamps."""
    return {
        (sample.name, tuple(sorted(sample.labels.items())), sample.value)
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def test_families_expose_the_samples_prometheus_clients_own_metrics_would() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    shards = metric_families.Shards()
    buckets = (0.001, 0.01, 0.1)
    counter = metric_families.CounterFamily("x_total", "a counter", ["call_type", "verb"], shards)
    gauge = metric_families.GaugeFamily("x_pending", "a gauge", ["call_type"], shards)
    histogram = metric_families.HistogramFamily(
        "x_seconds", "a histogram", ["call_type"], shards, buckets
    )
    for collector in (counter, gauge, histogram):
        ours.register(collector)
    p_counter = Counter("x_total", "a counter", ["call_type", "verb"], registry=theirs)
    p_gauge = Gauge("x_pending", "a gauge", ["call_type"], registry=theirs)
    p_histogram = Histogram(
        "x_seconds", "a histogram", ["call_type"], registry=theirs, buckets=buckets
    )
    for labels, amount in [
        (("pod_binding", "POST"), 1.0),
        (("pod_binding", "POST"), 2.0),
        (("pod_status_patch", "PATCH"), 1.0),
    ]:
        on_another_thread(partial(counter.add, labels, amount))  # summed over the threads
        p_counter.labels(*labels).inc(amount)
    for call_type, delta in [
        ("pod_binding", 1),
        ("pod_binding", 1),
        ("pod_binding", -1),
        ("pod_status_patch", -2),
    ]:
        gauge.add((call_type,), delta)
        p_gauge.labels(call_type).inc(delta)
    # on a bound, between bounds, above the last one, zero
    for call_type, seconds in [("a", 0.001), ("a", 0.005), ("a", 7.0), ("b", 0.0), ("b", 0.1)]:
        on_another_thread(partial(histogram.observe, (call_type,), seconds))
        histogram.observe(("c",), seconds)
        p_histogram.labels("c").observe(seconds)
        p_histogram.labels(call_type).observe(seconds)
    assert _samples(ours) == _samples(theirs)
    assert ours.get_sample_value("x_seconds_bucket", {"call_type": "a", "le": "0.001"}) == 1
    assert ours.get_sample_value("x_seconds_bucket", {"call_type": "a", "le": "+Inf"}) == 3
    with pytest.raises(ValueError, match="Duplicated timeseries"):  # describe() names them
        ours.register(metric_families.CounterFamily("x_total", "again", ["call_type"], shards))


def on_another_thread(update: Callable[[], None]) -> None:
    """Run ``update`` on a thread of its own, to its end."""
    thread = threading.Thread(target=update)
    thread.start()
    thread.join()


def test_metric_updates_from_many_threads_are_all_counted() -> None:
    m = Metrics()
    per_thread, threads = 5_000, 4
    start = threading.Barrier(threads)

    def hammer() -> None:
        start.wait()
        for _ in range(per_thread):
            m.request("pod_binding", "POST")
            m.sent("pod_binding", None, "success", 0.002)

    workers = [threading.Thread(target=hammer) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    total = per_thread * threads
    assert m.value("kdispatch_requests_total", call_type="pod_binding", verb="POST") == total
    name = "scheduler_async_api_call_execution_duration_seconds_count"
    assert m.value(name, call_type="pod_binding", result="success") == total


def test_the_limiter_wait_counts_the_grants_that_queued_and_no_other() -> None:
    """Three bindings at once with a burst of 1: the first is granted at once (not counted),
    the two others queue for a token and are counted in the bindings' lane."""
    server = InMemoryApiServer()
    pods = [server.create(make_pod(f"p{i}")) for i in range(3)]
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=10.0, burst=1))  # 0.1 s a token
    with Dispatcher(server, config) as d:
        futures = [d.submit(PodBinding.for_pod(p, "n1")) for p in pods]
        assert [f.result(timeout=10) for f in futures] == [Outcome.SUCCESS] * 3
        waits = d.metrics.value("kdispatch_rate_limiter_wait_seconds_count", lane="2")
    assert (waits, len(server.request_log)) == (2, 3)


def test_the_metrics_page_names_every_metric_a_dispatcher_registers() -> None:
    """docs/metrics-and-logs.md is the list a user builds dashboards from: every family a
    dispatcher registers is in its table (the upstream-named ones as ``<prefix>_...``)."""
    page = (Path(__file__).parents[2] / "docs" / "metrics-and-logs.md").read_text()
    registry = CollectorRegistry()
    d = Dispatcher(InMemoryApiServer(), metrics_registry=registry).start()
    try:
        names = [f.name + ("_total" if f.type == "counter" else "") for f in registry.collect()]
    finally:
        d.stop()
    shown = [name.replace("scheduler_", "<prefix>_", 1) for name in sorted(names)]
    assert [name for name in shown if f"`{name}`" not in page] == []
