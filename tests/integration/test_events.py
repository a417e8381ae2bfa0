"""Events: the EventRecord call, the recorder's series and spam filter, and the executor's
best-effort lane (Events never take a token a binding waits for; dropped ones are counted).
Checked on the server: the stored Events and the in-memory apiserver's request log."""

from __future__ import annotations

import math
from concurrent.futures import wait
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from prometheus_client import CollectorRegistry

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.facade.event_recorder import EventRecorder
from kdispatch.actors.model.call_types import default_call_types
from kdispatch.actors.model.calls import BEST_EFFORT, CallTypeRegistry
from kdispatch.actors.model.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RetryConfig,
)
from kdispatch.actors.model.errors import (
    CallFailed,
    CallTypeRegistrationError,
    DispatcherClosed,
    InvalidConfigError,
    InvalidInputError,
    Outcome,
    RequestDropped,
)
from kdispatch.actors.model.event_calls import EventRecord
from kdispatch.actors.model.kinds import DEFAULT_KINDS
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, Latency, make_node, make_pod
from kdispatch.testing.waiting import wait_for
from tests.backends import GatedBackend
from tests.clocks import ManualClock
from tests.configs import FAST, fast

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


def test_the_example_rbac_grants_every_verb_events_are_sent_with() -> None:
    """An Event is created, its series patched, and read back by name (after a 409, and to see
    whether a request whose reply was lost landed): ``examples/rbac.yaml`` grants all three."""
    docs = yaml.safe_load_all((Path(__file__).parents[2] / "examples" / "rbac.yaml").read_text())
    [role] = [d for d in docs if d and d["kind"] == "ClusterRole"]
    verbs = {
        verb
        for rule in role["rules"]
        if "events.k8s.io" in rule["apiGroups"] and "events" in rule["resources"]
        for verb in rule["verbs"]
    }
    assert verbs == {"get", "create", "patch"}


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


def test_the_window_runs_from_the_previous_occurrence_and_the_bucket_refills(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """Occurrences 300 s apart stay one Event however long the series runs (6 minutes from
    the previous occurrence, not the first); the spam filter gives one more Event per 300 s
    once its burst of 25 is spent."""
    a, b = _pod(server, "a"), _pod(server, "b")
    clock = ManualClock(1000.0)
    rec = EventRecorder(dispatcher, controller="s", clock=clock)
    for _ in range(3):
        assert _failed(rec, a, "same").result(5) is Outcome.SUCCESS
        clock.advance(300.0)
    [event] = _events(server)
    assert event["series"]["count"] == 3
    recorded = [_failed(rec, b, f"note {i}") for i in range(26)]
    assert sum(f is None for f in recorded) == 1  # the burst: 25
    clock.advance(299.0)
    assert _failed(rec, b, "too early") is None
    clock.advance(1.0)
    refilled = [_failed(rec, b, "one more"), _failed(rec, b, "and another")]
    assert refilled[0] is not None and refilled[1] is None
    wait([f for f in [*recorded, refilled[0]] if f is not None], timeout=10)
    notes = {e["note"] for e in _events(server) if e["regarding"]["name"] == "b"}
    assert len(notes) == 26 and "one more" in notes and "too early" not in notes


def test_occurrences_waiting_together_merge_into_one_request(server: InMemoryApiServer) -> None:
    """Repeats that arrive while the Event's create is on the wire wait together on its
    actor and go out as one series patch."""
    pod = _pod(server, "p")
    gated = GatedBackend(server)
    gated.gate.clear()  # every request waits
    with Dispatcher(gated, FAST, metrics_registry=CollectorRegistry()) as d:
        rec = EventRecorder(d, controller="s", clock=ManualClock(1000.0))
        first = _failed(rec, pod, "n")
        gated.wait_calls(1)  # the create, on the wire
        repeats = [_failed(rec, pod, "n") for _ in range(4)]
        gated.gate.set()
        outcomes = [f.result(10) for f in [first, *repeats]]
    assert outcomes == [Outcome.SUCCESS, *[Outcome.OVERWRITTEN] * 3, Outcome.SUCCESS]
    assert [r.op for r in server.request_log if r.kind == "Event"] == ["create", "patch"]
    [event] = _events(server)
    assert event["series"]["count"] == 5


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


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        ({"controller": "my scheduler"}, "not a qualified name"),
        ({"controller": "a/b/c"}, "at most one '/'"),
        ({"controller": "Example.com/sched"}, "prefix of a qualified name"),
        ({"controller": "s" * 64}, "1-63 characters"),
        ({"instance": ""}, "instance must be a non-empty str"),
        ({"instance": 5}, "instance must be a non-empty str"),
        ({"window": math.nan}, "window must not be NaN"),
        ({"window": 0}, "window must be > 0"),
        ({"spam_qps": math.nan}, "spam_qps must not be NaN"),
        ({"spam_burst": 10**400}, "spam_burst is too large"),
        ({"cache_size": 1.5}, "cache_size must be an int"),
        ({"clock": 5}, "clock must be callable"),
    ],
)
def test_a_recorder_setting_that_would_break_its_events_is_refused_when_built(
    server: InMemoryApiServer, dispatcher: Dispatcher, setting: dict[str, Any], match: str
) -> None:
    """kube-apiserver refuses every Event of a controller that is not a qualified name or of an
    empty instance; a NaN window never joins a series, a NaN rate never drops spam."""
    with pytest.raises(InvalidInputError, match=match):
        EventRecorder(dispatcher, **{"controller": "sched", **setting})
    assert not [r for r in server.request_log if r.kind == "Event"]


def test_a_prefixed_controller_and_an_unlimited_window_are_taken(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod = _pod(server, "p")
    rec = EventRecorder(
        dispatcher, controller="example.com/my-scheduler", window=math.inf, spam_qps=math.inf
    )
    futures = [_failed(rec, pod, "n") for _ in range(3)]
    assert all(f is not None and f.result(10) for f in futures)
    [event] = _events(server)
    assert event["reportingController"] == "example.com/my-scheduler"


def test_a_note_that_is_not_utf8_is_refused(dispatcher: Dispatcher) -> None:
    rec = EventRecorder(dispatcher, controller="s")
    with pytest.raises(InvalidInputError, match="UTF-8"):
        rec.event(make_pod("p", uid="u-p"), reason="R", action="A", note="\ud800")
    assert rec.recorded == 0


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


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


class Flood:
    """A dispatcher on a fake clock under a load bound by QPS (8 qps, burst 4): status
    patches for ``unfit`` pods, bindings for ``fit`` ones, and one Event per pod. The test
    moves the clock by hand (:meth:`step`): one token of each bucket per step."""

    def __init__(self, rate_limit: RateLimitConfig, unfit: int = 10, fit: int = 10) -> None:
        self.clock = ManualClock(1000.0)
        self.server = InMemoryApiServer()
        self.server.create(make_node("n1", cpu_m=100_000, mem_mi=100_000))
        self.pods = [self.server.create(make_pod(f"p{i}", uid=f"u-p{i}")) for i in range(20)]
        config = DispatcherConfig(rate_limit=rate_limit, executor=ExecutorConfig(workers=4))
        self.d = Dispatcher(
            self.server, config, metrics_registry=CollectorRegistry(), clock=self.clock
        ).start()
        self.calls = [
            self.d.submit(PodStatusPatch.for_pod(p, conditions=[UNSCHEDULABLE]))
            for p in self.pods[:unfit]
        ] + [self.d.submit(PodBinding.for_pod(p, "n1")) for p in self.pods[unfit : unfit + fit]]
        rec = EventRecorder(self.d, controller="s")
        self.events = [
            rec.event(p, reason="Scheduled", action="Binding", note="bound") for p in self.pods
        ]

    def sent(self) -> tuple[int, int]:
        """Requests the server saw: ``(calls, Events)``."""
        log = self.server.request_log
        return sum(r.kind == "Pod" for r in log), sum(r.kind == "Event" for r in log)

    def wait_sent(self, calls: int, events: int) -> None:
        """Wait until the server saw exactly ``calls`` calls and ``events`` Event requests."""
        wait_for(lambda: self.sent() == (calls, events), 10, f"{calls} calls, {events} Events")

    def step(self) -> None:
        """0.125 s later (exact in binary): one more token in each bucket."""
        self.clock.advance(0.125)
        self.d._executor.wake()  # the timer waits in real time; tell the executor now

    def stop(self) -> None:
        self.d.stop(drain=False, timeout=5)


def test_events_have_a_budget_of_their_own_under_a_qps_bound_load() -> None:
    """Bindings and status patches use the calls' bucket at exactly its rate (burst 4, then
    one per step) whatever the Events do, so no binding ever waits for an Event's token; the
    Events use a bucket of their own at the same rate meanwhile, and every one is written."""
    flood = Flood(RateLimitConfig(qps=8, burst=4))
    try:
        for step in range(17):
            flood.wait_sent(min(20, 4 + step), min(20, 4 + step))
            flood.step()
        assert {f.result(10) for f in flood.calls} == {Outcome.SUCCESS}
        assert all(f is not None and f.result(10) is Outcome.SUCCESS for f in flood.events)
        stats = flood.d.stats()
        assert stats["tokens_taken"] == 20  # the calls' bucket: calls only
        assert stats["events"] == {"tokens_taken": 20, "waiting": 0, "dropped": {}}
        assert stats["sent_total"] == 40
    finally:
        flood.stop()
    events = _events(flood.server)
    assert sorted(e["regarding"]["name"] for e in events) == sorted(
        p["metadata"]["name"] for p in flood.pods
    )
    fit = [flood.server.get("Pod", "default", f"p{i}") for i in range(10, 20)]
    assert {p["spec"].get("nodeName") for p in fit} == {"n1"}


def test_a_shared_budget_gives_events_only_spare_tokens() -> None:
    """``events_shared``: as before their own budget, Events take only a token of the calls'
    bucket that no call waits for, so under the load none goes before the last call, and
    then they go with the next tokens; none is dropped for waiting."""
    flood = Flood(RateLimitConfig(qps=8, burst=4, events_shared=True))
    try:
        for step in range(37):
            tokens = 4 + step
            flood.wait_sent(min(20, tokens), min(20, max(0, tokens - 20)))
            flood.step()
        assert {f.result(10) for f in flood.calls} == {Outcome.SUCCESS}
        assert all(f is not None and f.result(10) is Outcome.SUCCESS for f in flood.events)
        stats = flood.d.stats()
        assert stats["tokens_taken"] == 40  # one bucket for all
        assert stats["events"] == {"tokens_taken": 0, "waiting": 0, "dropped": {}}
    finally:
        flood.stop()
    assert len(_events(flood.server)) == 20


def test_events_past_the_queue_bound_are_dropped_and_counted_never_those_that_wait() -> None:
    """One Event takes the Events' only token, three wait (``events_max_pending=3``), the
    other six are dropped unsent and counted; the three that wait are written as tokens
    come, however long they waited."""
    clock = ManualClock(1000.0)
    server = InMemoryApiServer()
    pods = [server.create(make_pod(f"p{i}", uid=f"u-p{i}")) for i in range(10)]
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=8, burst=1),
        executor=ExecutorConfig(workers=8, events_max_pending=3),
    )
    with Dispatcher(server, config, metrics_registry=CollectorRegistry(), clock=clock) as d:
        rec = EventRecorder(d, controller="s")
        recorded = [rec.event(p, reason="Scheduled", action="Binding", note="n") for p in pods]
        futures = [f for f in recorded if f is not None]
        assert len(futures) == 10  # none caught by the spam filter
        wait_for(lambda: sum(f.done() for f in futures) == 7, 10, "one written, six dropped")
        dropped = [f for f in futures if f.done() and f.exception() is not None]
        assert len(dropped) == 6
        for f in dropped:
            exc = f.exception()
            assert isinstance(exc, CallFailed) and isinstance(exc.cause, RequestDropped)
            assert "events_max_pending" not in str(exc) and "3 Events" in str(exc)
        assert d.metrics.value("kdispatch_events_dropped_total", reason="queue_full") == 6
        wait_for(lambda: len(_events(server)) == 1, 10, "the first Event written")
        assert d.stats()["events"] == {
            "tokens_taken": 1,
            "waiting": 3,
            "dropped": {"queue_full": 6},
        }
        clock.advance(100.0)  # long past the old 10 s: waiting is no reason to drop
        for _ in range(3):
            d._executor.wake()
            clock.advance(0.125)  # one more token (exact in binary)
        wait_for(lambda: len(_events(server)) == 4, 10, "the three that waited written")
        kept = [f for f in futures if f not in dropped]
        assert [f.result(10) for f in kept] == [Outcome.SUCCESS] * 4
        assert d.stats()["events"]["dropped"] == {"queue_full": 6}


def test_events_take_at_most_a_quarter_of_the_workers() -> None:
    """Eight workers: two Events on the wire at most, the others wait although workers and
    tokens are free; a binding submitted meanwhile still gets a worker at once."""
    server = InMemoryApiServer()
    pods = [_pod(server, f"p{i}") for i in range(5)]
    gated = GatedBackend(server)
    gated.gate.clear()  # every request waits
    config = DispatcherConfig(executor=ExecutorConfig(workers=8))
    with Dispatcher(gated, config, metrics_registry=CollectorRegistry()) as d:
        rec = EventRecorder(d, controller="s")
        events = [rec.event(p, reason="Scheduled", action="Binding", note="n") for p in pods[:4]]
        wait_for(lambda: d.stats()["events"]["waiting"] == 2, 10, "two Events waiting")
        binding = d.submit(PodBinding.for_pod(pods[4], "n1"))  # a grant pass: no third Event
        calls = gated.wait_calls(3)
        assert sorted(op for op, _ in calls) == ["bind", "create", "create"]
        assert d.stats()["events"]["waiting"] == 2
        gated.gate.set()
        assert binding.result(10) is Outcome.SUCCESS
        assert [f.result(10) for f in events if f is not None] == [Outcome.SUCCESS] * 4
    assert len(_events(server)) == 4


def test_a_shared_budget_drops_a_follow_up_without_a_spare_token() -> None:
    """``events_shared``: a series patch whose Event is gone is answered 404, and the create
    that would follow finds no spare token in the calls' bucket: dropped unsent, counted
    ``throttled``, the call fails ``CallFailed`` caused by ``RequestDropped``."""
    server = InMemoryApiServer()
    pod = _pod(server, "p")
    sink = EventRecorder(type("Sink", (), {"submit": lambda self, call: call})(), controller="s")
    sink.event(pod, reason="Scheduled", action="Binding", note="n")  # its create never sent
    patch = sink.event(pod, reason="Scheduled", action="Binding", note="n")
    assert isinstance(patch, EventRecord) and not patch.create
    clock = ManualClock(1000.0)  # no token comes back while the test runs
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=1, burst=1, events_shared=True))
    with Dispatcher(server, config, metrics_registry=CollectorRegistry(), clock=clock) as d:
        error = d.submit(patch).exception(timeout=10)
        assert isinstance(error, CallFailed) and isinstance(error.cause, RequestDropped)
        assert d.metrics.value("kdispatch_events_dropped_total", reason="throttled") == 1
        assert d.stats()["events"]["dropped"] == {"throttled": 1}
    assert [r.op for r in server.request_log] == ["patch"]
    assert _events(server) == []


def test_events_budget_config_is_validated() -> None:
    assert RateLimitConfig(qps=20, burst=7).events_budget() == (20, 7)
    assert RateLimitConfig(events_qps=5, events_burst=10).events_budget() == (5, 10)
    assert RateLimitConfig(events_shared=True).events_budget() is None
    for bad in (
        {"events_qps": 0},
        {"events_burst": 0},
        {"events_burst": 1.5},
        {"events_shared": "yes"},
        {"events_shared": True, "events_qps": 5},
    ):
        with pytest.raises(InvalidConfigError):
            RateLimitConfig(**bad)
    with pytest.raises(InvalidConfigError):
        ExecutorConfig(events_max_pending=0)


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


def test_events_stay_the_lowest_lane_for_workers() -> None:
    """With two workers and a binding on the wire, an Event waits although its bucket has
    tokens: it never takes the last free worker, which the next call may need. Once the
    binding's worker is free again, it goes."""
    from tests.integration.test_backlog import Turnstile

    gate = Turnstile()
    server = InMemoryApiServer(latency=Latency(fixed=1.0), sleep=gate)
    pod = server.create(make_pod("p", uid="u-p"))
    config = DispatcherConfig(executor=ExecutorConfig(workers=2))
    try:
        with Dispatcher(server, config, metrics_registry=CollectorRegistry()) as d:
            binding = d.submit(PodBinding.for_pod(pod, "n1"))
            gate.wait_arrived(1)
            event = EventRecorder(d, controller="s").event(
                pod, reason="Scheduled", action="Binding", note="n"
            )
            assert event is not None
            wait_for(lambda: d.stats()["events"]["waiting"] == 1, 10, "the Event waiting")
            assert gate.arrived == 1
            gate.let(1)
            assert binding.result(10) is Outcome.SUCCESS
            gate.wait_arrived(2)
            gate.let(1)
            assert event.result(10) is Outcome.SUCCESS
    finally:
        gate.let(10)
    assert [e["reason"] for e in _events(server)] == ["Scheduled"]


def test_an_event_landed_when_it_is_there_with_its_occurrences() -> None:
    """``Call.landed`` of an Event read back by name: there (any UID: the call does not know
    the server's), and for a series patch, counting at least its occurrences."""
    rec = EventRecorder(type("Sink", (), {"submit": lambda self, call: call})(), controller="s")
    pod = make_pod("p", uid="u-p")
    first = rec.event(pod, reason="Scheduled", action="Binding", note="n")
    second = rec.event(pod, reason="Scheduled", action="Binding", note="n")
    assert isinstance(first, EventRecord) and isinstance(second, EventRecord)
    stored = {**first.body, "metadata": {**first.body["metadata"], "uid": "server-uid"}}
    assert first.landed(stored)
    assert not second.landed(stored)  # count 2: the series is not there yet
    assert second.landed({**stored, "series": {"count": 2, "lastObservedTime": "x"}})


@pytest.mark.parametrize("fault", ["409", "404"])
def test_a_series_patch_answered_409_or_404_keeps_its_event(
    server: InMemoryApiServer, dispatcher: Dispatcher, fault: str
) -> None:
    """A 409 on the series patch (or a 404 whose create then finds the Event there) reads the
    Event back by name, as any call after a 409, and patches again: the Event's actor is not
    taken for deleted, so the later occurrences reach it too."""
    pod = _pod(server, "p")
    rec = EventRecorder(dispatcher, controller="s", clock=ManualClock(1000.0))
    assert _failed(rec, pod, "n").result(10) is Outcome.SUCCESS
    [event] = _events(server)
    server.script("patch", fault, name=event["metadata"]["name"])
    assert [_failed(rec, pod, "n").result(10) for _ in range(3)] == [Outcome.SUCCESS] * 3
    [event] = _events(server)
    assert event["series"]["count"] == 4
    ops = [(r.op, r.outcome) for r in server.request_log if r.kind == "Event"]
    assert ("get", "ok") in ops and ops[-3:] == [("patch", "ok")] * 3


def test_an_event_found_gone_after_a_409_is_made_again(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """The GET after a series patch's 409 answers 404 (the Event expired meanwhile): the next
    attempt makes it again, and the Event's actor is not taken for deleted."""
    pod = _pod(server, "p")
    rec = EventRecorder(dispatcher, controller="s", clock=ManualClock(1000.0))
    assert _failed(rec, pod, "n").result(10) is Outcome.SUCCESS
    [event] = _events(server)
    name = event["metadata"]["name"]
    server.script("patch", "409", name=name)
    server.script("get", "404", name=name)
    assert _failed(rec, pod, "n").result(10) is Outcome.SUCCESS
    assert _failed(rec, pod, "n").result(10) is Outcome.SUCCESS
    [event] = _events(server)
    assert event["series"]["count"] == 3


@pytest.mark.parametrize(
    ("fault", "requests"),
    [
        ("500", [("create", "500"), ("create", "ok")]),
        ("apply_then_fail", [("create", "apply_then_fail"), ("create", "AlreadyExists"),
                             ("patch", "ok")]),
    ],
)  # fmt: skip
def test_repeats_while_the_create_backs_off_become_one_event_counting_them_all(
    fault: str, requests: list[tuple[str, str]]
) -> None:
    """The Event's create meets a 500, or lands with its reply lost; two repeats arrive while
    it backs off. One Event, whose series counts the three; no occurrence fails."""
    clock = ManualClock(1000.0)
    server = InMemoryApiServer()
    pod = _pod(server, "p1")
    server.script("create", fault)
    config = fast(base_backoff=1.0, max_backoff=1.0, jitter=0.0)
    with Dispatcher(server, config, metrics_registry=CollectorRegistry(), clock=clock) as d:
        rec = EventRecorder(d, controller="s", clock=ManualClock(1000.0))
        first = _failed(rec, pod, "n")
        server.wait_for_request("create")  # answered with the fault: the create backs off
        futures = [first, _failed(rec, pod, "n"), _failed(rec, pod, "n")]
        for _ in range(40):  # the backoff over, until every occurrence resolved
            clock.advance(1.0)
            d._executor.wake()
            if not wait(futures, timeout=0.25).not_done:
                break
        outcomes = [f.result(10) for f in futures]
    assert outcomes == [Outcome.OVERWRITTEN, Outcome.OVERWRITTEN, Outcome.SUCCESS]
    [event] = _events(server)
    assert event["series"]["count"] == 3
    assert [(r.op, r.outcome) for r in server.request_log if r.kind == "Event"] == requests


def test_an_event_back_from_a_backoff_is_not_dropped_for_a_full_lane() -> None:
    """An Event that backs off after a 500 was admitted already: when its backoff ends while
    ``events_max_pending`` Events wait, it waits too, and is written."""
    clock = ManualClock(1000.0)
    server = InMemoryApiServer()
    pods = [server.create(make_pod(f"p{i}", uid=f"u-p{i}")) for i in range(3)]
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=8, burst=2),
        retry=RetryConfig(base_backoff=1.0, max_backoff=1.0, jitter=0.0),
        executor=ExecutorConfig(workers=8, events_max_pending=2),
    )
    with Dispatcher(server, config, metrics_registry=CollectorRegistry(), clock=clock) as d:
        rec = EventRecorder(d, controller="s")
        server.script("create", "500")
        retried = _failed(rec, pods[0], "a")
        wait_for(lambda: any(r.outcome == "500" for r in server.request_log), 10, "the 500")
        first = _failed(rec, pods[1], "b")  # the bucket's second token
        assert first.result(10) is Outcome.SUCCESS
        waiting = [_failed(rec, pods[2], note) for note in ("c1", "c2")]
        wait_for(lambda: d.stats()["events"]["waiting"] == 2, 10, "two Events waiting")
        clock.advance(1.5)  # the backoff is over; the bucket holds two tokens again
        futures = [retried, first, *waiting]
        for _ in range(40):  # one more token per step, until every Event resolved
            d._executor.wake()
            if not wait(futures, timeout=0.25).not_done:
                break
            clock.advance(0.125)
        assert [f.result(10) for f in futures] == [Outcome.SUCCESS] * 4
        assert d.stats()["events"]["dropped"] == {}
    assert len(_events(server)) == 4


def test_reason_and_action_are_limited_in_bytes_as_the_apiserver_counts(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """kube-apiserver refuses a reason or action over 128 bytes: 128 two-byte characters are
    refused at the call, 64 are recorded."""
    pod = _pod(server, "p")
    rec = EventRecorder(dispatcher, controller="s")
    for field_name in ("reason", "action"):
        fields = {"reason": "R", "action": "A", field_name: "é" * 128}
        with pytest.raises(InvalidInputError, match="bytes"):
            rec.event(pod, note="n", **fields)
    fields = {"reason": "é" * 64, "action": "é" * 64}
    assert rec.event(pod, note="n", **fields).result(10) is Outcome.SUCCESS  # type: ignore[union-attr]


def test_an_object_with_the_longest_name_gets_its_events(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """An Event's name is the regarding object's name and a unique suffix; a name too long
    to leave room for the suffix is cut (the full name stays in ``regarding``)."""
    name = "a" * 200 + "." + "b" * 52  # 253 characters: the longest object name
    pod = server.create(make_pod(name, uid="u-long"))
    rec = EventRecorder(dispatcher, controller="s")
    assert _failed(rec, pod, "n").result(10) is Outcome.SUCCESS
    [event] = _events(server)
    assert len(event["metadata"]["name"]) <= 253
    assert event["metadata"]["name"].startswith("a" * 200 + ".")
    assert event["regarding"]["name"] == name


def test_after_stop_no_event_is_reported_waiting() -> None:
    """Events waiting for a token when the dispatcher stops resolve ``DispatcherClosed``, and
    ``stats()`` no longer counts them as waiting."""
    clock = ManualClock(1000.0)
    server = InMemoryApiServer()
    pods = [_pod(server, f"p{i}") for i in range(4)]
    config = DispatcherConfig(rate_limit=RateLimitConfig(qps=1, burst=1))
    d = Dispatcher(server, config, metrics_registry=CollectorRegistry(), clock=clock).start()
    rec = EventRecorder(d, controller="s")
    futures = [rec.event(p, reason="Scheduled", action="Binding", note="n") for p in pods]
    wait_for(lambda: d.stats()["events"]["waiting"] == 3, 10, "three Events waiting")
    d.stop(drain=False, timeout=5)
    outcomes = [f.exception(10) for f in futures if f is not None]
    assert sum(isinstance(e, DispatcherClosed) for e in outcomes) == 3
    assert d.stats()["events"]["waiting"] == 0


def test_the_cause_of_a_dropped_event_is_importable_from_kdispatch() -> None:
    """The Events page tells a program to recognise a dropped Event by its ``CallFailed``'s
    ``cause``: that type is part of the public face."""
    import kdispatch

    assert kdispatch.RequestDropped is RequestDropped
    assert "RequestDropped" in kdispatch.__all__


def test_an_events_follow_up_waiting_for_a_token_never_holds_an_actor_thread() -> None:
    """No limit on the calls, a finite one on the Events: the Events' follow-up requests may
    wait for a token, so requests go through the workers, never on the actors' turns. An
    Event's create answered 409 waits for a token for its GET (the clock stands still) while a
    binding of another pod is sent; the GET goes once a token comes."""
    clock = ManualClock(1000.0)
    server = InMemoryApiServer()
    a, b = _pod(server, "a"), _pod(server, "b")
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=math.inf, burst=1, events_qps=0.5, events_burst=1)
    )
    server.script("create", "409")
    with Dispatcher(server, config, metrics_registry=CollectorRegistry(), clock=clock) as d:
        event = EventRecorder(d, controller="s").event(
            a, reason="Scheduled", action="Binding", note="n"
        )
        assert event is not None
        server.wait_for_request("create")
        assert d.submit(PodBinding.for_pod(b, "n1")).result(10) is Outcome.SUCCESS
        assert [r.op for r in server.request_log] == ["create", "bind"]  # the GET still waits
        assert not event.done()
        clock.advance(2.0)  # the Events' bucket holds a token again: the GET goes
        d._executor.wake()
        server.wait_for_request("get")
        clock.advance(2.0)  # and one more, for the create again (the GET found no Event)
        d._executor.wake()
        assert event.result(10) is Outcome.SUCCESS
    assert [r.op for r in server.request_log] == ["create", "bind", "get", "create"]
    assert len(_events(server)) == 1
