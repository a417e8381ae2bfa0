"""The core's promises, checked on the server's state and the server's request log.

* a stale ``PodScheduled=False`` never lands on a bound pod (kubernetes#139602), whichever
  way the pod got bound, even after the binding's actor was reaped idle;
* a landed binding moves the actor's resourceVersion knowledge on: the next patch re-reads
  once instead of walking into a 409;
* a retried preemption re-reads the pod and keeps its ``DisruptionTarget`` condition and its
  ``lastTransitionTime``;
* every request takes a rate-limiter token (409 re-reads, preemptions' second request, the
  re-reads after lost replies and the read-back when retries ran out);
* a call of another type never replaces a pending binding: both are sent, in order;
* one GET per 409;
* a 429 leaves the object trusted: the retry is sent with no re-read;
* 401 and 403 are never retried; 409s are, within ``max_conflict_retries``;
* after ``revoke()`` nothing is sent again, not even a call whose request was on the wire.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from kubernetes import client as k8s

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.call_types import default_call_types
from kdispatch.actors.model.config import (
    DispatcherConfig,
    RateLimitConfig,
    RegistryConfig,
    RetryConfig,
)
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallConflict,
    CallFailed,
    CallStale,
    ForbiddenError,
    LeadershipLost,
    Outcome,
    TooManyRequestsError,
    UnauthorizedError,
)
from kdispatch.actors.model.objects import Obj, ObjectRef, get_path, with_path
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from kdispatch.testing.waiting import wait_for
from tests.backends import GatedBackend, T
from tests.clocks import ManualClock
from tests.configs import fast
from tests.factories import InertCall

pytestmark = pytest.mark.timeout(60)

UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/3 nodes are available",
}
CONFIG = fast(budget=5.0)


def condition(pod: Obj | None, ctype: str) -> dict[str, Any] | None:
    for c in get_path(pod, "status", "conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def requests(server: InMemoryApiServer) -> list[tuple[str, str]]:
    return [(r.op, r.outcome) for r in server.request_log]


def requests_of(server: InMemoryApiServer, name: str) -> list[tuple[str, str]]:
    return [(r.op, r.outcome) for r in server.request_log if r.name == name]


def assert_bound_and_scheduled(server: InMemoryApiServer, name: str = "p1") -> None:
    stored = server.get_object("Pod", "default", name)
    assert stored is not None
    assert get_path(stored, "spec", "nodeName") == "n1"
    scheduled = condition(stored, "PodScheduled")
    assert scheduled is not None and scheduled["status"] == "True", scheduled


# --------------------------------------------------------------------------- #139602


def test_stale_unschedulable_after_own_binding_never_lands(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("p1"))  # the scheduler's pre-binding snapshot
    with Dispatcher(server, CONFIG) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(10) is Outcome.SUCCESS
        with pytest.raises(CallStale):
            d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE])).result(10)
    assert_bound_and_scheduled(server)
    assert requests(server) == [("bind", "ok")]  # nothing was even tried


def test_stale_unschedulable_after_out_of_band_binding_never_lands(
    server: InMemoryApiServer,
) -> None:
    pod = server.create(make_pod("p1"))
    server.bind("default", "p1", uid=pod["metadata"]["uid"], node="n1")  # another scheduler
    with Dispatcher(server, CONFIG) as d, pytest.raises(CallStale):
        d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE])).result(10)
    assert_bound_and_scheduled(server)
    # the patch was computed on the stale pod: 409, one GET, then re-validated and dropped
    assert requests(server) == [("bind", "ok"), ("patch_status", "Conflict"), ("get", "ok")]


def test_stale_unschedulable_when_the_informer_already_shows_the_binding(
    server: InMemoryApiServer,
) -> None:
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, CONFIG) as d:
        nominated = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        assert nominated.result(10) is Outcome.SUCCESS  # the pod is tracked from here on
        server.bind("default", "p1", uid=pod["metadata"]["uid"], node="n1")
        bound = server.get_object("Pod", "default", "p1")
        assert bound is not None
        d.on_update(bound)  # what an informer delivers
        with pytest.raises(CallStale):
            d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE])).result(10)
    assert_bound_and_scheduled(server)
    assert [op for op, _ in requests(server)] == ["patch_status", "bind"]


def test_unschedulable_pending_when_the_binding_lands_is_dropped(
    server: InMemoryApiServer,
) -> None:
    """The patch waits behind an in-flight call; the binding lands meanwhile."""
    pod = server.create(make_pod("p1"))
    gated = GatedBackend(server, hold="p1")
    with Dispatcher(gated, CONFIG) as d:
        nominate = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        gated.wait_calls(1)  # the nomination is in flight, held
        patch = d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE]))
        server.bind("default", "p1", uid=pod["metadata"]["uid"], node="n1")
        gated.gate.set()
        # the held nomination meets a 409, merges into the waiting patch, and the merged
        # patch, re-validated on the re-read (bound) pod, is stale
        assert nominate.result(10) is Outcome.OVERWRITTEN
        with pytest.raises(CallStale):
            patch.result(10)
    assert_bound_and_scheduled(server)


def test_stale_unschedulable_over_http_with_the_official_client(
    server: InMemoryApiServer,
) -> None:
    pod = server.create(make_pod("p1"))
    http = ApiServerHTTP(server).start()
    backend = KubernetesBackend.for_url(http.url, workers=4, request_timeout=5.0)
    watch_client = k8s.ApiClient(backend.api_client.configuration)
    informer = Informer(ClientListWatch(watch_client, "Pod", request_timeout=5.0), name="pods")
    try:
        with Dispatcher(backend, CONFIG) as d:
            informer.attach(d)
            informer.start()
            assert informer.wait_for_sync(10)
            assert d.submit(PodBinding.for_pod(pod, "n1")).result(10) is Outcome.SUCCESS
            with pytest.raises(CallStale):
                d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE])).result(10)
            assert informer.stop(timeout=10)
    finally:
        informer.stop(timeout=10)
        watch_client.close()  # type: ignore[no-untyped-call]
        backend.close()
        http.stop()
    assert_bound_and_scheduled(server)
    assert "patch_status" not in [op for op, _ in requests(server)]


def test_unschedulable_for_an_unbound_pod_still_lands(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, CONFIG) as d:
        patch = PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE])
        assert d.submit(patch).result(10) is Outcome.SUCCESS
    scheduled = condition(server.get_object("Pod", "default", "p1"), "PodScheduled")
    assert scheduled is not None and scheduled["status"] == "False"


# --------------------------------------------------------------------------- landed binding


def test_patch_after_own_binding_rereads_instead_of_walking_into_a_409(
    server: InMemoryApiServer,
) -> None:
    pod = server.create(make_pod("p1"))
    ready = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
    with Dispatcher(server, CONFIG) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(10) is Outcome.SUCCESS
        assert d.submit(PodStatusPatch.for_pod(pod, conditions=[ready])).result(10) is (
            Outcome.SUCCESS
        )
    assert requests(server) == [("bind", "ok"), ("get", "ok"), ("patch_status", "ok")]
    stored = server.get_object("Pod", "default", "p1")
    assert condition(stored, "Ready") == {**ready, "lastTransitionTime": ANY_TIME}
    assert_bound_and_scheduled(server)


class _WatchBeatsReply(GatedBackend):
    """Delivers the bound pod to the dispatcher's informer hook once a binding landed, and
    returns the binding's reply only after the actor took that event."""

    dispatcher: Dispatcher | None = None

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        answer = super().around(op, request, send)
        if op == "bind" and self.dispatcher is not None:
            bound = self.inner.get_object("Pod", request["namespace"], request["name"])
            self.dispatcher.on_update(bound)
            self.dispatcher.view(request["uid"])  # answered once the event was taken
        return answer


def test_patch_after_own_binding_the_informer_showed_first_does_not_reread(
    server: InMemoryApiServer,
) -> None:
    """The watch event of the bound pod beats the binding's reply: the observed pod shows
    the binding at its own resourceVersion, so the next patch needs no re-read."""
    pod = server.create(make_pod("p1"))
    backend = _WatchBeatsReply(server)
    ready = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
    with Dispatcher(backend, CONFIG) as d:
        backend.dispatcher = d
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(10) is Outcome.SUCCESS
        assert d.submit(PodStatusPatch.for_pod(pod, conditions=[ready])).result(10) is (
            Outcome.SUCCESS
        )
    assert requests(server) == [("bind", "ok"), ("patch_status", "ok")]
    assert condition(server.get_object("Pod", "default", "p1"), "Ready") == {
        **ready,
        "lastTransitionTime": ANY_TIME,
    }
    assert_bound_and_scheduled(server)


class _AnyTime(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.endswith("Z")

    __hash__ = str.__hash__


ANY_TIME = _AnyTime("<a timestamp>")


# --------------------------------------------------------------------------- preemption


class _SnapshotOnDelete(GatedBackend):
    """Records the pod's DisruptionTarget as the server holds it when each DELETE arrives."""

    def __init__(self, inner: InMemoryApiServer) -> None:
        super().__init__(inner)
        self.seen: list[dict[str, Any] | None] = []

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        if op == "delete":
            held = self.inner.get_object(request["kind"], request["namespace"], request["name"])
            self.seen.append(condition(held, "DisruptionTarget"))
        return super().around(op, request, send)


@pytest.mark.parametrize("faults", [("429",), ("timeout",), ("429", "500", "429")])
def test_retried_preemption_keeps_disruption_target_and_its_time(
    server: InMemoryApiServer, faults: tuple[str, ...]
) -> None:
    """No informer: after a 429, a 5xx or a lost reply on the DELETE, the retry re-reads the
    pod and sends only the deletion (no re-read after a 429 on a retry's one request: that
    applied nothing); the condition the first try wrote stays as it was."""
    pod = server.create(make_pod("victim"))
    server.script("delete", *faults, name="victim")
    backend = _SnapshotOnDelete(server)
    with Dispatcher(backend, CONFIG) as d:
        assert d.preempt(pod, preemptor="default/vip").result(10) is Outcome.SUCCESS
    assert server.get_object("Pod", "default", "victim") is None
    expected = [("patch_status", "ok")]
    for i, fault in enumerate(faults):
        expected.append(("delete", fault))
        if i == 0 or fault != "429":
            expected.append(("get", "ok"))
    assert requests(server) == [*expected, ("delete", "ok")]
    first = backend.seen[0]
    assert first is not None and first["status"] == "True"
    assert first["lastTransitionTime"].endswith("Z")
    assert backend.seen == [first] * (len(faults) + 1)  # never rewritten


# --------------------------------------------------------------------------- tokens


def test_tokens_taken_equal_requests_seen_with_conflicts_and_preemptions(
    server: InMemoryApiServer,
) -> None:
    pods = [server.create(make_pod(f"p{i}")) for i in range(20)]
    victims = [server.create(make_pod(f"v{i}")) for i in range(20)]
    for p in pods:
        server.script("patch_status", "409", "409", name=p["metadata"]["name"])
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=10_000.0, burst=10),
        retry=RetryConfig(base_backoff=0.0, max_backoff=0.0, max_conflict_retries=5),
    )
    with Dispatcher(server, config) as d:
        futs = [d.submit(PodStatusPatch.for_pod(p, conditions=[UNSCHEDULABLE])) for p in pods]
        futs += [d.preempt(v, preemptor="default/vip") for v in victims]
        assert {f.result(20) for f in futs} == {Outcome.SUCCESS}
        stats = d.stats()
        tokens = d.tokens_taken
    seen = len(server.request_log)
    # 20 x (409, get, 409, get, ok) + 20 x (patch, delete)
    assert seen == 20 * 5 + 20 * 2
    assert tokens == seen
    assert stats["sent_total"] == seen


def test_tokens_taken_equal_requests_seen_with_lost_replies_and_read_backs(
    server: InMemoryApiServer,
) -> None:
    """A patch that applied but whose reply was lost (its re-read shows it: ``SKIPPED``); a
    binding whose three tries time out (the read-back shows it did not land); a preemption's
    DELETE reset, then throttled: each request the server saw took one token."""
    a, b, c = (server.create(make_pod(name)) for name in ("a", "b", "c"))
    server.script("patch_status", "apply_then_fail", name="a")
    server.script("bind", "timeout", "timeout", "timeout", name="b")
    server.script("delete", "conn_reset", "429", name="c")
    with Dispatcher(server, fast(max_attempts=3)) as d:
        patch = d.submit(PodStatusPatch.for_pod(a, nominated_node_name="n1"))
        binding = d.submit(PodBinding.for_pod(b, "n1"))
        preemption = d.preempt(c, add_condition=False)
        assert patch.result(10) is Outcome.SKIPPED
        assert isinstance(binding.exception(10), CallFailed)
        assert preemption.result(10) is Outcome.SUCCESS
        tokens, stats = d.tokens_taken, d.stats()
    assert [op for op, _ in requests_of(server, "a")] == ["patch_status", "get"]
    assert [op for op, _ in requests_of(server, "b")] == ["bind"] * 3 + ["get"]
    assert [op for op, _ in requests_of(server, "c")] == ["delete", "get", "delete", "delete"]
    assert tokens + stats["events"]["tokens_taken"] == stats["sent_total"]
    assert stats["sent_total"] == len(server.request_log) == 10


# --------------------------------------------------------------------------- supersession


@dataclass(frozen=True, slots=True)
class PodLabelNote(InertCall):
    """A user call type on Pod in a higher lane that declares no supersession."""

    call_type: ClassVar[str] = "pod_label_note"
    relevance: ClassVar[int] = 4

    note: str

    def is_noop(self, obj: Obj | None) -> bool:
        return bool(get_path(obj, "status", "message") == self.note)

    def apply(self, obj: Obj) -> Obj:
        return with_path(obj, ("status", "message"), self.note)

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        ref = self.ref
        return backend.patch_status(
            "Pod",
            ref.namespace,
            ref.name,
            {"status": {"message": self.note}},
            uid=ref.uid,
            resource_version=None,
        )


def test_a_call_of_another_type_queues_behind_a_pending_binding(
    server: InMemoryApiServer,
) -> None:
    call_types = default_call_types()
    call_types.register(PodLabelNote)
    blocker = server.create(make_pod("p1"))
    gated = GatedBackend(server, hold="p1")
    with Dispatcher(gated, CONFIG, call_types=call_types) as d:
        first = d.submit(PodStatusPatch.for_pod(blocker, nominated_node_name="n1"))
        gated.wait_calls(1)  # in flight and held: what follows is pending
        binding = d.submit(PodBinding.for_pod(blocker, "n1"))
        note = d.submit(PodLabelNote(ObjectRef.of(blocker, "Pod"), "hello", basis=blocker))
        gated.gate.set()
        assert first.result(10) is Outcome.SUCCESS
        assert binding.result(10) is Outcome.SUCCESS
        assert note.result(10) is Outcome.SUCCESS
    assert_bound_and_scheduled(server)
    stored = server.get_object("Pod", "default", "p1")
    assert get_path(stored, "status", "message") == "hello"
    ops = [op for op, _ in gated.calls]
    assert ops.index("bind") < len(ops) - 1  # the binding went first, then the note


def test_binding_supersedes_a_pending_status_patch(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("p1"))
    gated = GatedBackend(server, hold="p1")
    with Dispatcher(gated, CONFIG) as d:
        first = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        gated.wait_calls(1)
        patch = d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE]))
        binding = d.submit(PodBinding.for_pod(pod, "n1"))
        late = d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE]))
        gated.gate.set()
        assert first.result(10) is Outcome.SUCCESS
        assert patch.result(10) is Outcome.OVERWRITTEN
        assert late.result(10) is Outcome.SKIPPED
        assert binding.result(10) is Outcome.SUCCESS
    assert_bound_and_scheduled(server)


# --------------------------------------------------------------------------- one GET per 409


def test_one_get_per_binding_conflict(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("p1"))
    server.script("bind", "409", name="p1")
    with Dispatcher(server, CONFIG) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(10) is Outcome.SUCCESS
    assert requests(server) == [("bind", "409"), ("get", "ok"), ("bind", "ok")]


def test_binding_whose_lost_reply_landed_is_success_after_one_get(
    server: InMemoryApiServer,
) -> None:
    pod = server.create(make_pod("p1"))
    server.script("bind", "apply_then_fail", name="p1")
    with Dispatcher(server, CONFIG) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(10) is Outcome.SUCCESS
    assert requests(server) == [("bind", "apply_then_fail"), ("bind", "Conflict"), ("get", "ok")]
    assert_bound_and_scheduled(server)


def test_retry_after_on_429_is_honoured_per_object(server: InMemoryApiServer) -> None:
    """A 429 with Retry-After delays only its object; the others go on."""
    slow = server.create(make_pod("slow"))
    others = [server.create(make_pod(f"p{i}")) for i in range(5)]
    server.script("bind", TooManyRequestsError("slow down", retry_after=0.5), name="slow")
    with Dispatcher(server, CONFIG) as d:
        held = d.submit(PodBinding.for_pod(slow, "n1"))
        assert all(
            d.submit(PodBinding.for_pod(p, "n1")).result(10) is Outcome.SUCCESS for p in others
        )
        assert held.result(10) is Outcome.SUCCESS
    log = server.request_log
    first, retry = [r.t for r in log if r.name == "slow"]
    assert retry - first >= 0.5
    assert all(r.t < retry for r in log if r.name != "slow")


def test_a_preemption_that_replaces_a_call_backing_off_waits_out_its_retry_after(
    server: InMemoryApiServer,
) -> None:
    """A status patch meets a 429 (Retry-After 0.5 s); the preemption that cancels it and
    takes its place sends nothing before the Retry-After passed, as a binding would."""
    pod = server.create(make_pod("p1"))
    server.script("patch_status", TooManyRequestsError("slow down", retry_after=0.5), name="p1")
    with Dispatcher(server, CONFIG) as d:
        patch = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
        server.wait_for_request("patch_status")  # its 429 came back, or is on its way
        preemption = d.preempt(pod, add_condition=False)
        assert preemption.result(10) is Outcome.SUCCESS
        assert isinstance(patch.exception(10), CallCancelled)
    first, *rest = server.request_log
    assert (first.op, first.outcome) == ("patch_status", "TooManyRequests")
    assert rest and all(r.t - first.t >= 0.5 for r in rest), [(r.op, r.t - first.t) for r in rest]
    assert server.get_object("Pod", "default", "p1") is None


def test_an_actor_reaped_idle_leaves_its_knowledge_to_the_next_one() -> None:
    """A caller's informer cache may lag behind what the dispatcher's own calls wrote. The
    actor that knew better is reaped; the next call of the object, made on that stale copy,
    must not be skipped as a no-op: the server holds the newer value."""
    server = InMemoryApiServer()
    start = server.create(make_pod("p1"))
    chaos = "example.com/Chaos"
    clock = ManualClock()
    config = dataclasses.replace(
        CONFIG, registry=RegistryConfig(idle_timeout=1.0), reap_interval=0.01
    )
    with Dispatcher(server, config, clock=clock) as d:
        beta = d.submit(PodStatusPatch.for_pod(start, conditions=[_cond(chaos, "Beta")]))
        assert beta.result(10) is Outcome.SUCCESS
        after_beta = server.get("Pod", "default", "p1")  # the caller's copy, from now on
        alpha = d.submit(PodStatusPatch.for_pod(after_beta, conditions=[_cond(chaos, "Alpha")]))
        assert alpha.result(10) is Outcome.SUCCESS
        d.view(start["metadata"]["uid"])  # answered once the actor noted it is idle
        clock.advance(2.0)  # idle for longer than idle_timeout: the housekeeper reaps it
        wait_for(lambda: d.live_actors == 0, 10, "the idle actor reaped")
        again = d.submit(PodStatusPatch.for_pod(after_beta, conditions=[_cond(chaos, "Beta")]))
        assert again.result(10) is Outcome.SUCCESS  # not SKIPPED on the stale copy
    ops = [op for op, _ in requests(server)]
    # the caller's own read, then one re-read before the third patch: its basis was too old
    assert ops == ["patch_status", "get", "patch_status", "get", "patch_status"]
    assert (condition(server.get("Pod", "default", "p1"), chaos) or {}).get("reason") == "Beta"


def test_stale_unschedulable_after_the_binding_actor_was_reaped_never_lands() -> None:
    """behaviour.md, "Trust": the binding's actor is reaped idle; a ``PodScheduled=False`` made
    on the caller's copy from before that binding reads the pod first and is found stale."""
    server = InMemoryApiServer()
    before = server.create(make_pod("p1"))
    clock = ManualClock()
    config = dataclasses.replace(
        CONFIG, registry=RegistryConfig(idle_timeout=1.0), reap_interval=0.01
    )
    with Dispatcher(server, config, clock=clock) as d:
        assert d.submit(PodBinding.for_pod(before, "n1")).result(10) is Outcome.SUCCESS
        d.view(before["metadata"]["uid"])  # answered once the actor noted it is idle
        clock.advance(2.0)  # idle for longer than idle_timeout: the housekeeper reaps it
        wait_for(lambda: d.live_actors == 0, 10, "the idle actor reaped")
        late = d.submit(PodStatusPatch.for_pod(before, conditions=[UNSCHEDULABLE]))
        assert isinstance(late.exception(10), CallStale)
    assert requests(server) == [("bind", "ok"), ("get", "ok")]
    assert_bound_and_scheduled(server)


def _cond(ctype: str, reason: str) -> dict[str, str]:
    return {"type": ctype, "status": "False", "reason": reason}


# --------------------------------------------------------------------------- trust after a 429


def test_a_429_is_retried_without_a_re_read(server: InMemoryApiServer) -> None:
    """A 429 refuses a request before it is handled: the object is as the dispatcher saw it,
    and the retry goes out with no GET (each one a token an overloaded server does not need)."""
    pod = server.create(make_pod("p1"))
    server.script("patch_status", "429", "429", name="p1")
    with Dispatcher(server, CONFIG) as d:
        call = PodStatusPatch.for_pod(pod, nominated_node_name="n1")
        assert d.submit(call).result(10) is Outcome.SUCCESS
    assert requests(server) == [
        ("patch_status", "429"),
        ("patch_status", "429"),
        ("patch_status", "ok"),
    ]
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["status"]["nominatedNodeName"] == "n1"


def test_refused_credentials_are_not_retried_and_are_the_cause(server: InMemoryApiServer) -> None:
    a, b = server.create(make_pod("a")), server.create(make_pod("b"))
    server.script("bind", ForbiddenError("no"), name="a")
    server.script("bind", UnauthorizedError("who"), name="b")
    with Dispatcher(server, CONFIG) as d:
        refused = [d.submit(PodBinding.for_pod(p, "n1")).exception(10) for p in (a, b)]
    causes = [type(e.cause) for e in refused if isinstance(e, CallFailed)]
    assert causes == [ForbiddenError, UnauthorizedError]
    assert [(r.op, r.name, r.outcome) for r in server.request_log] == [
        ("bind", "a", "Forbidden"),
        ("bind", "b", "Unauthorized"),
    ]


def test_conflicts_are_rebased_at_most_max_conflict_retries_times(
    server: InMemoryApiServer,
) -> None:
    pod = server.create(make_pod("p1"))
    server.script("patch_status", *["409"] * 10, name="p1")
    config = dataclasses.replace(
        CONFIG, retry=dataclasses.replace(CONFIG.retry, max_conflict_retries=2)
    )
    with Dispatcher(server, config) as d:
        call = PodStatusPatch.for_pod(pod, nominated_node_name="n1")
        assert isinstance(d.submit(call).exception(10), CallConflict)
        assert d.tokens_taken == len(server.request_log)
    assert requests(server) == [("patch_status", "409"), ("get", "ok")] * 3


# --------------------------------------------------------------------------- revoke


def test_after_revoke_a_call_back_from_the_wire_is_not_sent_again(
    server: InMemoryApiServer,
) -> None:
    """Leadership lost while a binding is on the wire, and no send gate: the binding meets a
    500 and resolves with the revocation's error instead of going out again, and a call
    pending then is never sent."""
    gated = GatedBackend(server, hold="p1")
    pod, other = server.create(make_pod("p1")), server.create(make_pod("p2"))
    server.script("bind", "500", name="p1")
    one_token = dataclasses.replace(  # the next token in 2 s: p2's call stays pending
        CONFIG, rate_limit=RateLimitConfig(qps=0.5, burst=1)
    )
    with Dispatcher(gated, one_token) as d:
        wire = d.submit(PodBinding.for_pod(pod, "n1"))
        gated.wait_calls(1)
        pending = d.submit(PodStatusPatch.for_pod(other, nominated_node_name="n1"))
        lost = LeadershipLost("lost")
        d.revoke(lost)
        assert pending.exception(10) is lost
        gated.gate.set()
        assert wire.exception(10) is lost
    assert [(r.op, r.name, r.outcome) for r in server.request_log] == [("bind", "p1", "500")]
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and get_path(stored, "spec", "nodeName") is None
