"""Events: the EventRecord call, the recorder's series and spam filter, and the executor's
best-effort lane (Events never take a token a binding waits for; dropped ones are counted).
Checked on the server: the stored Events and the in-memory apiserver's request log."""

from __future__ import annotations

from concurrent.futures import wait
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kdispatch.actors.call_types import default_call_types
from kdispatch.actors.calls import BEST_EFFORT, CallTypeRegistry
from kdispatch.actors.config import DispatcherConfig, ExecutorConfig, RateLimitConfig
from kdispatch.actors.dispatcher import Dispatcher
from kdispatch.actors.errors import (
    CallFailed,
    CallTypeRegistrationError,
    InvalidInputError,
    Outcome,
    RequestDropped,
)
from kdispatch.actors.event_calls import EventRecord
from kdispatch.actors.event_recorder import EventRecorder
from kdispatch.actors.kinds import DEFAULT_KINDS
from kdispatch.actors.pod_calls import PodBinding
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_node, make_pod
from tests.clocks import ManualClock

pytestmark = pytest.mark.timeout(60)


def _events(server: InMemoryApiServer) -> list[dict[str, Any]]:
    items = server.list("Event").items
    return sorted(items, key=lambda e: e["metadata"]["name"])


def _pod(server: InMemoryApiServer, name: str) -> dict[str, Any]:
    return server.create(make_pod(name, uid=f"u-{name}"))


def _failed(recorder: EventRecorder, pod: dict[str, Any], note: str) -> Any:
    return recorder.event(
        pod, type="Warning", reason="FailedScheduling", action="Scheduling", note=note
    )


def test_event_kind_is_events_k8s_io() -> None:
    info = DEFAULT_KINDS.lookup("Event")
    assert (info.api_version, info.plural, info.namespaced) == ("events.k8s.io/v1", "events", True)


def test_repeats_become_one_event_with_a_series(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod = _pod(server, "p1")
    clock = ManualClock(1000.0)
    rec = EventRecorder(
        dispatcher, controller="my-scheduler", instance="my-scheduler-a", clock=clock
    )
    note = "0/3 nodes are available: 3 Insufficient cpu."
    first = _failed(rec, pod, note)
    assert first.result(5) is Outcome.SUCCESS  # created before the repeats arrive
    repeats = [_failed(rec, pod, note) for _ in range(4)]
    wait(repeats, timeout=5)
    [event] = _events(server)
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert event["metadata"]["name"].startswith("p1.")
    assert event["series"]["count"] == 5
    assert event["series"]["lastObservedTime"] >= event["eventTime"]
    assert event["regarding"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": "default",
        "name": "p1",
        "uid": "u-p1",
        "resourceVersion": pod["metadata"]["resourceVersion"],
    }
    assert (event["reason"], event["action"], event["type"], event["note"]) == (
        "FailedScheduling",
        "Scheduling",
        "Warning",
        note,
    )
    assert (event["reportingController"], event["reportingInstance"]) == (
        "my-scheduler",
        "my-scheduler-a",
    )
    ops = [(r.op, r.kind) for r in server.request_log if r.kind == "Event"]
    # one create, then the series patches (repeats that waited together merged into one)
    assert ops[0] == ("create", "Event")
    assert 2 <= len(ops) <= 5 and set(ops[1:]) == {("patch", "Event")}

    # a new note is a new Event; after the window, the same note starts a new one too
    _failed(rec, pod, "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity.")
    clock.now += 361.0
    last = _failed(rec, pod, note)
    assert last.result(5) is Outcome.SUCCESS
    events = _events(server)
    assert len(events) == 3
    assert sorted(e.get("series", {}).get("count", 1) for e in events) == [1, 1, 5]


def test_spam_filter_per_regarding_object(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    a, b = _pod(server, "a"), _pod(server, "b")
    rec = EventRecorder(dispatcher, controller="s", clock=ManualClock(1000.0))
    futures = [_failed(rec, a, f"note {i}") for i in range(30)]  # 30 distinct Events
    assert sum(f is None for f in futures) == 5  # burst 25, one more per 300 s
    assert rec.spam_dropped == 5
    other = _failed(rec, b, "note 0")  # another object has its own bucket
    assert other is not None
    wait([f for f in [*futures, other] if f is not None], timeout=10)
    assert sum(e["regarding"]["name"] == "a" for e in _events(server)) == 25


def test_recorder_rejects_bad_input(dispatcher: Dispatcher) -> None:
    rec = EventRecorder(dispatcher, controller="s")
    pod = make_pod("p", uid="u-p")
    with pytest.raises(InvalidInputError):
        rec.event(pod, type="Info", reason="R", action="A", note="n")
    with pytest.raises(InvalidInputError):
        rec.event(pod, reason="", action="A", note="n")
    with pytest.raises(InvalidInputError):
        EventRecorder(dispatcher, controller="")
    with pytest.raises(InvalidInputError):
        EventRecorder(object(), controller="s")  # type: ignore[arg-type]


def test_a_patch_of_a_missing_event_creates_it(server: InMemoryApiServer) -> None:
    pod = _pod(server, "p")
    rec = EventRecorder(type("Sink", (), {"submit": lambda self, call: call})(), controller="s")
    first = rec.event(pod, reason="Scheduled", action="Binding", note="n")
    second = rec.event(pod, reason="Scheduled", action="Binding", note="n")
    assert isinstance(first, EventRecord) and isinstance(second, EventRecord)
    assert (second.create, second.count) == (False, 2)
    second.send(server, None)  # the create was never sent: the patch answers 404
    [event] = _events(server)
    assert event["series"]["count"] == 2
    assert [r.op for r in server.request_log] == ["patch", "create"]
    assert first.merge(second).create and first.merge(second).count == 2


def test_best_effort_registration_rules() -> None:
    registry = CallTypeRegistry()

    class Loud(EventRecord):
        call_type = "loud"
        relevance = 2

    with pytest.raises(CallTypeRegistrationError):
        registry.register(Loud)
    assert default_call_types().spec("event_record").relevance == BEST_EFFORT


def test_events_never_delay_bindings_and_drops_are_counted() -> None:
    """Under throttling (10 qps, burst 1), a flood of Events waits in the best-effort lane:
    bindings submitted after it are sent with the next tokens, none of the flood's Events
    between them, and the Events that waited too long are dropped and counted."""
    server = InMemoryApiServer()
    server.create(make_node("n1", cpu_m=100_000, mem_mi=100_000))
    pods = [server.create(make_pod(f"p{i}", uid=f"u-p{i}")) for i in range(50)]
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=10, burst=1),
        executor=ExecutorConfig(workers=4, best_effort_max_wait=0.5),
    )
    registry = CollectorRegistry()
    with Dispatcher(server, config, metrics_registry=registry) as d:
        rec = EventRecorder(d, controller="s")
        flood = [
            rec.event(p, type="Warning", reason="FailedScheduling", action="Scheduling", note="x")
            for p in pods[:40]
        ]
        before = len(server.request_log)
        bindings = [d.submit(PodBinding.for_pod(p, "n1")) for p in pods[40:45]]
        assert all(f.result(10) is Outcome.SUCCESS for f in bindings)
        wait([f for f in flood if f is not None], timeout=10)
        dropped = d.metrics.value("kdispatch_events_dropped_total", reason="throttled")
    log = server.request_log
    binds = [i for i, r in enumerate(log) if r.op == "bind"]
    assert len(binds) == 5
    assert binds == list(range(binds[0], binds[0] + 5))  # no Event between the bindings
    # at most the Event in flight and one granted before the bindings arrived went first
    assert binds[0] <= before + 2
    sent = [r for r in log if r.kind == "Event"]
    failed = []
    for f in flood:
        assert f is not None
        exc = f.exception()
        if exc is not None:
            assert isinstance(exc, CallFailed) and isinstance(exc.cause, RequestDropped)
            failed.append(f)
    assert failed and dropped == len(failed)
    assert len(sent) + len(failed) == 40


def test_kubernetes_backend_records_events() -> None:
    mem = InMemoryApiServer()
    pod = mem.create(make_pod("p", uid="u-p"))
    with (
        ApiServerHTTP(mem) as srv,
        KubernetesBackend.for_url(srv.url) as backend,
        Dispatcher(backend, DispatcherConfig(), metrics_registry=CollectorRegistry()) as d,
    ):
        rec = EventRecorder(d, controller="s")
        first = rec.event(pod, reason="Scheduled", action="Binding", note="n")
        assert first is not None and first.result(5) is Outcome.SUCCESS
        again = rec.event(pod, reason="Scheduled", action="Binding", note="n")
        assert again is not None and again.result(5) is Outcome.SUCCESS
        [event] = _events(mem)
        assert event["series"]["count"] == 2
        assert event["regarding"]["uid"] == "u-p"
