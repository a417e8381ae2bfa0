"""Held calls (``submit(call, after=...)``) and call groups (``Dispatcher.group``) end to end on
the in-memory apiserver: every test checks what the server applied, in which order."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import pytest

from kdispatch.actors.engine.groups import CallGroup
from kdispatch.actors.engine.messages import CallFuture, Deleted
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.call_types import default_call_types
from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.claim_calls import ClaimStatusPatch
from kdispatch.actors.model.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RetryConfig,
)
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallFailed,
    DependencyCycleError,
    DependencyFailed,
    DispatcherClosed,
    GroupClosedError,
    GroupFailed,
    GroupsNotSupported,
    InvalidPrerequisiteError,
    InvalidRequestError,
    LeadershipLost,
    ObjectNotFound,
    Outcome,
    TooManyRequestsError,
)
from kdispatch.actors.model.eviction_calls import PodEviction
from kdispatch.actors.model.objects import Obj, ObjectRef
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.testing.audit import RequestRecord
from kdispatch.testing.memory import InMemoryApiServer, make_claim, make_pod
from tests.backends import GatedBackend
from tests.clocks import ManualClock
from tests.configs import FAST
from tests.factories import cond

pytestmark = pytest.mark.timeout(120)


def slow_429() -> TooManyRequestsError:
    """A 429 whose Retry-After keeps the call pending (in backoff) for the whole test."""
    return TooManyRequestsError("injected 429, retry much later", retry_after=20.0)


@pytest.fixture
def caller(server: InMemoryApiServer) -> Iterator[Dispatcher]:
    """A dispatcher stopped without draining (its calls may be in a long backoff)."""
    d = Dispatcher(server, FAST).start()
    yield d
    d.stop(drain=False, timeout=10)


def attempted(server: InMemoryApiServer, op: str, name: str) -> None:
    """Wait until the server answered a first ``op`` on ``name`` (the call is then in its
    backoff, still pending)."""
    server.wait_for_request(op, name=name)


def reserve(claim: dict[str, Any], pod: dict[str, Any]) -> ClaimStatusPatch:
    meta = pod["metadata"]
    consumer = {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
    return ClaimStatusPatch.for_claim(claim, reserve=[consumer])


def outcome(fut: Future[Any]) -> Any:
    try:
        return fut.result(timeout=30)
    except Exception as exc:
        return exc


def applied(log: list[RequestRecord], op: str, name: str) -> int:
    """Index of the request that applied ``op`` to ``name`` (a lost reply applied it too)."""
    hits = [
        i
        for i, r in enumerate(log)
        if r.op == op and r.name == name and r.outcome in ("ok", "apply_then_fail")
    ]
    assert hits, f"no {op} applied to {name}: {log}"
    return hits[0]


def groups_cancelled(dispatcher: Dispatcher, cause: str) -> float:
    """How many call groups ``dispatcher`` cancelled for ``cause`` (the metric)."""
    return dispatcher.metrics.value("kdispatch_call_groups_cancelled_total", cause=cause)


def requests(log: list[RequestRecord], op: str, name: str) -> list[int]:
    return [i for i, r in enumerate(log) if r.op == op and r.name == name]


# --------------------------------------------------------------------------- held calls


def test_binding_lands_after_both_claim_patches_even_when_the_first_meets_two_429s(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod = server.create(make_pod("p1"))
    c1, c2 = server.create(make_claim("c1")), server.create(make_claim("c2"))
    server.script("patch_status", "429", "429", name="c1")
    f1 = dispatcher.submit(reserve(c1, pod))
    f2 = dispatcher.submit(reserve(c2, pod))
    bind = dispatcher.submit(PodBinding.for_pod(pod, "n1"), after=[f1, f2])
    assert [outcome(f) for f in (f1, f2, bind)] == [Outcome.SUCCESS] * 3
    log = server.request_log
    assert [r.outcome for r in log if r.op == "patch_status" and r.name == "c1"] == [
        "429",
        "429",
        "ok",
    ]
    bound = applied(log, "bind", "p1")
    assert bound > applied(log, "patch_status", "c1")
    assert bound > applied(log, "patch_status", "c2")
    assert server.get_object("Pod", "default", "p1")["spec"]["nodeName"] == "n1"  # type: ignore[index]


def test_a_prerequisite_failing_with_422_fails_the_held_binding_and_nothing_is_bound(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod = server.create(make_pod("p1"))
    c1 = server.create(make_claim("c1"))
    server.script("patch_status", InvalidRequestError("claim status is invalid"), name="c1")
    f1 = dispatcher.submit(reserve(c1, pod))
    bind = dispatcher.submit(PodBinding.for_pod(pod, "n1"), after=[f1])
    err = outcome(bind)
    assert isinstance(err, DependencyFailed) and isinstance(err, CallCancelled)
    assert isinstance(err.cause, CallFailed) and err.cause is outcome(f1)
    assert err.uid == pod["metadata"]["uid"] and err.call_type == "pod_binding"
    assert requests(server.request_log, "bind", "p1") == []
    assert "nodeName" not in server.get_object("Pod", "default", "p1")["spec"]  # type: ignore[index]
    assert dispatcher.stats()["outcomes"]["pod_binding:cancelled"] == 1


def test_an_overwritten_prerequisite_is_followed_to_the_call_that_merged_it(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    """Two pods share a claim: the second pod's reservation merges into the first one's,
    still pending (in backoff); the first pod's binding waits for the merged patch to land."""
    p1, p2 = server.create(make_pod("p1")), server.create(make_pod("p2"))
    shared = server.create(make_claim("shared"))
    server.script("patch_status", TooManyRequestsError("later", retry_after=0.2), name="shared")
    g1 = caller.group(owner=p1)
    s1 = g1.submit(reserve(shared, p1))
    b1 = g1.submit(PodBinding.for_pod(p1, "n1"), after=[s1])
    attempted(server, "patch_status", "shared")
    s2 = caller.group(owner=p2).submit(reserve(shared, p2))  # merges s1 in
    assert s1.result(timeout=5) is Outcome.OVERWRITTEN
    assert not b1.done()  # OVERWRITTEN: the reservation has not landed yet
    assert requests(server.request_log, "bind", "p1") == []
    assert outcome(b1) is Outcome.SUCCESS and outcome(s2) is Outcome.SUCCESS
    log = server.request_log
    assert applied(log, "bind", "p1") > applied(log, "patch_status", "shared")
    reserved = server.get_object("ResourceClaim", "default", "shared")["status"]["reservedFor"]  # type: ignore[index]
    assert {r["name"] for r in reserved} == {"p1", "p2"}


def test_a_held_call_merged_into_a_newer_one_passes_its_hold_on(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    """A second binding of the pod, submitted unheld, merges the held one in: the merged
    binding carries the held one's hold, and goes once the claim patch landed."""
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    server.script("patch_status", TooManyRequestsError("later", retry_after=0.5), name="c1")
    f1 = caller.submit(reserve(c1, pod))
    held = caller.submit(PodBinding.for_pod(pod, "n1"), after=[f1])
    attempted(server, "patch_status", "c1")
    newer = caller.submit(PodBinding.for_pod(pod, "n1"))  # merges the held binding in
    assert outcome(held) is Outcome.OVERWRITTEN and held.successor is newer
    assert outcome(newer) is Outcome.SUCCESS and outcome(f1) is Outcome.SUCCESS
    log = server.request_log
    assert applied(log, "bind", "p1") > applied(log, "patch_status", "c1")
    assert caller.held_calls == 0
    assert caller.metrics.value("kdispatch_held_calls", call_type="pod_binding") == 0


def test_a_call_that_supersedes_a_held_step_fails_with_its_prerequisite(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    """Another caller's binding supersedes a nomination held on a claim reservation: the
    binding carries the nomination's hold, so when the reservation fails, nothing of the chain
    is sent (the binding used to go at once, and a call held on the nomination after it)."""
    pod, p2 = server.create(make_pod("p1")), server.create(make_pod("p2"))
    c1 = server.create(make_claim("c1"))
    server.script("patch_status", TooManyRequestsError("later", retry_after=0.2), "404", name="c1")
    reserved = caller.submit(reserve(c1, pod))
    nominated = caller.submit(
        PodStatusPatch.for_pod(pod, nominated_node_name="n1"), after=[reserved]
    )
    follower = caller.submit(PodBinding.for_pod(p2, "n2"), after=[nominated])
    attempted(server, "patch_status", "c1")
    binding = caller.submit(PodBinding.for_pod(pod, "n1"))  # supersedes the nomination
    assert isinstance(outcome(reserved), ObjectNotFound)
    assert isinstance(outcome(binding), DependencyFailed)
    assert isinstance(outcome(follower), DependencyFailed)
    assert requests(server.request_log, "bind", "p1") == []
    assert requests(server.request_log, "bind", "p2") == []


def test_prerequisites_resolved_before_submit_need_no_hold(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod, p2 = server.create(make_pod("p1")), server.create(make_pod("p2"))
    c1, c2 = server.create(make_claim("c1")), server.create(make_claim("c2"))
    server.script("patch_status", InvalidRequestError("no"), name="c2")
    ok, bad = dispatcher.submit(reserve(c1, pod)), dispatcher.submit(reserve(c2, p2))
    assert outcome(ok) is Outcome.SUCCESS and isinstance(outcome(bad), CallFailed)
    live = dispatcher.live_actors
    failed = dispatcher.submit(PodBinding.for_pod(p2, "n1"), after=[ok, bad])
    assert failed.done() and isinstance(failed.exception(), DependencyFailed)
    assert dispatcher.live_actors == live  # decided at submit: never reached an actor
    assert outcome(dispatcher.submit(PodBinding.for_pod(pod, "n1"), after=[ok])) is Outcome.SUCCESS
    assert dispatcher.metrics.value("kdispatch_held_calls", call_type="pod_binding") == 0
    log = server.request_log
    assert requests(log, "bind", "p2") == [] and len(requests(log, "bind", "p1")) == 1


def test_held_call_gauge_and_release(server: InMemoryApiServer, caller: Dispatcher) -> None:
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    server.script("patch_status", slow_429(), name="c1")
    f1 = caller.submit(reserve(c1, pod))
    bind = caller.submit(PodBinding.for_pod(pod, "n1"), after=[f1])
    attempted(server, "patch_status", "c1")
    assert not bind.done() and caller.held_calls == 1
    assert caller.metrics.value("kdispatch_held_calls", call_type="pod_binding") == 1
    assert requests(server.request_log, "bind", "p1") == []  # held: no token, no request
    caller.cancel(c1["metadata"]["uid"])
    assert isinstance(outcome(bind), DependencyFailed)
    assert isinstance(outcome(bind).cause, CallCancelled)
    assert caller.held_calls == 0
    assert caller.metrics.value("kdispatch_held_calls", call_type="pod_binding") == 0


def test_held_calls_take_no_token_and_no_worker_from_other_objects_calls(
    server: InMemoryApiServer,
) -> None:
    """docs/groups.md: while it waits, a held call takes no token, no worker and no lane. One
    worker and three tokens that never refill: the claim patch takes one, twenty bindings held
    on it take none, two other pods' bindings take the other two; the claim patch cancelled,
    every held binding fails with it as the cause, unsent."""
    claim = server.create(make_claim("c1"))
    held_pods = [server.create(make_pod(f"h{i}")) for i in range(20)]
    free_pods = [server.create(make_pod(f"f{i}")) for i in range(2)]
    server.script("patch_status", slow_429(), name="c1")
    config = dataclasses.replace(
        FAST,
        rate_limit=RateLimitConfig(qps=1.0, burst=3),
        executor=ExecutorConfig(workers=1),
    )
    d = Dispatcher(server, config, clock=ManualClock(1000.0)).start()
    try:
        reserved = d.submit(reserve(claim, held_pods[0]))
        attempted(server, "patch_status", "c1")
        held = [d.submit(PodBinding.for_pod(p, "n1"), after=[reserved]) for p in held_pods]
        free = [d.submit(PodBinding.for_pod(p, "n1")) for p in free_pods]
        assert [outcome(f) for f in free] == [Outcome.SUCCESS] * 2
        assert d.held_calls == 20
        d.cancel(claim["metadata"]["uid"])
        cancelled = outcome(reserved)
        assert isinstance(cancelled, CallCancelled)
        assert all(
            isinstance(outcome(f), DependencyFailed) and outcome(f).cause is cancelled for f in held
        )
        assert d.tokens_taken == 3
    finally:
        d.stop(drain=False, timeout=10)
    assert [r.name for r in server.request_log if r.op == "bind"] == ["f0", "f1"]


def test_bad_prerequisites_are_refused(server: InMemoryApiServer, dispatcher: Dispatcher) -> None:
    pod = server.create(make_pod("p1"))
    call = PodBinding.for_pod(pod, "n1")
    other = Dispatcher(InMemoryApiServer(), FAST)
    foreign = CallFuture()
    foreign.owner = other
    bad: object
    for bad in ("abc", 3, [object()], [Future()], [CallFuture()], [foreign], Future()):
        with pytest.raises(InvalidPrerequisiteError):
            dispatcher.submit(call, after=bad)  # type: ignore[arg-type]
    assert dispatcher.outstanding == 0 and server.request_log == []


@pytest.mark.parametrize("gang", [None, 2])
def test_a_cancelled_group_refuses_bad_prerequisites_as_an_open_one_does(
    server: InMemoryApiServer, dispatcher: Dispatcher, gang: int | None
) -> None:
    """A step's ``after=`` is checked whether or not its group was cancelled (by its caller
    or, on another thread, by its owner's deletion): the same bad call always raises."""
    owner, pod = server.create(make_pod("owner")), server.create(make_pod("p1"))
    group = dispatcher.group(owner=owner, gang=gang)
    assert group.cancel()
    bad: object
    for bad in ("abc", 3, [object()], [Future()], [None]):
        with pytest.raises(InvalidPrerequisiteError):
            group.submit(PodBinding.for_pod(pod, "n1"), after=bad)  # type: ignore[arg-type]
    refused = group.submit(PodBinding.for_pod(pod, "n1"))
    assert isinstance(outcome(refused), CallCancelled)
    assert dispatcher.outstanding == 0 and server.request_log == []


# --------------------------------------------------------------------------- cycles


def test_cycles_are_refused_at_submit(server: InMemoryApiServer) -> None:
    gated = GatedBackend(server)
    gated.gate.clear()  # every request stays in flight until the gate opens
    pods = {n: server.create(make_pod(n)) for n in ("p1", "p2", "p3", "p4")}
    claims = {n: server.create(make_claim(n)) for n in ("c1", "c2", "c3")}
    with Dispatcher(gated, FAST) as d:
        blocker = d.submit(reserve(claims["c1"], pods["p1"]))
        gated.wait_calls(1)
        g1, g2 = d.group(owner=pods["p1"]), d.group(owner=pods["p2"])
        # a step waiting for its own group
        with pytest.raises(DependencyCycleError):
            g1.submit(PodBinding.for_pod(pods["p1"], "n1"), after=[g1.future])
        # through another group: g2 waits for g1, then g1 may not wait for g2
        s2 = g2.submit(PodBinding.for_pod(pods["p2"], "n1"), after=[blocker])
        s1 = g1.submit(PodBinding.for_pod(pods["p1"], "n1"), after=[g2.future])
        with pytest.raises(DependencyCycleError):
            g2.submit(PodBinding.for_pod(pods["p3"], "n1"), after=[g1.future])
        # a prerequisite not resolved on the call's own object (a merge could jump it)
        with pytest.raises(DependencyCycleError):
            d.submit(reserve(claims["c1"], pods["p4"]), after=[blocker])
        # a step on an object whose held call waits for the group (the queue edge)
        held = d.submit(reserve(claims["c2"], pods["p3"]), after=[g1.future])
        with pytest.raises(DependencyCycleError):
            g1.submit(reserve(claims["c2"], pods["p4"]))
        # not a cycle: another object, waiting for the same prerequisite
        fine = d.submit(reserve(claims["c3"], pods["p4"]), after=[blocker])
        g1.seal()
        g2.seal()
        gated.gate.set()
        assert [outcome(f) for f in (blocker, s2, s1, held, fine)] == [Outcome.SUCCESS] * 5
        assert outcome(g1.future) == [Outcome.SUCCESS]
        assert outcome(g2.future) == [Outcome.SUCCESS]
    log = server.request_log
    assert applied(log, "bind", "p2") > applied(log, "patch_status", "c1")
    assert applied(log, "bind", "p1") > applied(log, "bind", "p2")
    assert applied(log, "patch_status", "c2") > applied(log, "bind", "p1")
    assert requests(log, "bind", "p3") == []  # the refused steps never went anywhere
    assert len(requests(log, "patch_status", "c1")) == 1


def test_cycles_closing_through_other_objects_are_refused_at_submit(
    server: InMemoryApiServer,
) -> None:
    """docs/groups.md, "Cycles", two hops away: a claim patch whose prerequisites reach a
    held patch of the same claim through a pod's held call; a preemption whose prerequisites
    reach a held call on its own pod through another pod's; a claim patch after a binding that
    superseded a held call and carries its hold. Nothing of them is sent; the rest goes."""
    gated = GatedBackend(server, hold="gate")
    gate = server.create(make_pod("gate"))
    a, b, v = (server.create(make_pod(name)) for name in ("a", "b", "v"))
    c = server.create(make_claim("c"))
    with Dispatcher(gated, FAST) as d:
        first = d.submit(PodStatusPatch.for_pod(gate, nominated_node_name="n1"))
        gated.wait_calls(1)  # on the wire until the gate opens
        y = d.submit(reserve(c, a), after=[first])
        x = d.submit(PodStatusPatch.for_pod(a, nominated_node_name="n1"), after=[y])
        with pytest.raises(DependencyCycleError):
            d.submit(reserve(c, b), after=[x])
        z = d.submit(PodStatusPatch.for_pod(b, nominated_node_name="n1"), after=[x])
        with pytest.raises(DependencyCycleError):
            d.preempt(a, after=[z])
        w = d.submit(PodBinding.for_pod(a, "n1"))  # supersedes x, holding on y in its place
        with pytest.raises(DependencyCycleError):
            d.submit(reserve(c, v), after=[w])
        gated.gate.set()
        results = [outcome(f) for f in (first, y, x, z, w)]
    assert results == [Outcome.SUCCESS] * 2 + [Outcome.OVERWRITTEN] + [Outcome.SUCCESS] * 2
    assert [(r.op, r.name) for r in server.request_log] == [
        ("patch_status", "gate"),
        ("patch_status", "c"),
        ("bind", "a"),
        ("patch_status", "b"),
    ]


@dataclass(frozen=True, slots=True)
class PodNote(Call):
    """A user's call type on Pod that neither supersedes a built-in one nor is superseded: it
    sets a condition of its own."""

    call_type: ClassVar[str] = "pod_note"
    kind: ClassVar[str] = "Pod"
    relevance: ClassVar[int] = 2
    reads_object: ClassVar[bool] = False

    ref: ObjectRef
    note: str

    def _condition(self) -> dict[str, Any]:
        return {"type": "Note", "status": "True", "reason": "Note", "message": self.note}

    def is_noop(self, obj: Obj | None) -> bool:
        conditions = (obj or {}).get("status", {}).get("conditions") or []
        return self._condition() in conditions

    def apply(self, obj: Obj) -> Obj:
        status = dict(obj.get("status") or {})
        others = [c for c in status.get("conditions") or [] if c.get("type") != "Note"]
        status["conditions"] = [*others, self._condition()]
        return {**obj, "status": status}

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        ref = self.ref
        body = {"status": {"conditions": [self._condition()]}}
        return backend.patch_status(
            "Pod", ref.namespace, ref.name, body, uid=ref.uid, resource_version=None
        )


def test_a_held_call_may_wait_for_a_call_on_its_own_object(server: InMemoryApiServer) -> None:
    """The held status patch waits for a note on its own pod and merges into an older status
    patch queued ahead of that note: its actor keeps it behind the note (no deadlock), so the
    call is accepted (it used to be refused as a possible cycle)."""
    gated = GatedBackend(server, hold="p1")  # p1's requests wait for the gate
    p1 = server.create(make_pod("p1"))
    types = default_call_types()
    types.register(PodNote)
    with Dispatcher(gated, FAST, call_types=types) as d:
        first = d.submit(PodNote(ObjectRef.of(p1), "first"))
        gated.wait_calls(1)  # on the wire: what follows on p1 queues
        older = d.submit(PodStatusPatch.for_pod(p1, nominated_node_name="n1"))
        note = d.submit(PodNote(ObjectRef.of(p1), "second"))
        blocked = cond(reason="Unschedulable", message="waits for the note")
        held = d.submit(PodStatusPatch.for_pod(p1, conditions=[blocked]), after=[note])
        assert not held.done()
        gated.gate.set()
        assert outcome(held) is Outcome.SUCCESS
        assert [outcome(f) for f in (first, older, note)] == [
            Outcome.SUCCESS,
            Outcome.OVERWRITTEN,
            Outcome.SUCCESS,
        ]
        assert older.successor is held
    log = server.request_log
    assert [r.outcome for i, r in enumerate(log) if i in requests(log, "patch_status", "p1")] == [
        "ok"
    ] * 3  # the first note, the second one, then the merged status patch
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["status"]["nominatedNodeName"] == "n1"
    by_type = {c["type"]: c for c in stored["status"]["conditions"]}
    assert by_type["Note"]["message"] == "second"
    assert by_type["PodScheduled"]["message"] == "waits for the note"


# --------------------------------------------------------------------------- groups


def test_owner_deletion_cancels_a_retrying_claim_patch_and_the_held_binding(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    server.script("patch_status", slow_429(), name="c1")
    with caller.group(owner=pod) as g:
        claim = g.submit(reserve(c1, pod))
        bind = g.submit(PodBinding.for_pod(pod, "n1"), after=[claim])
    attempted(server, "patch_status", "c1")  # its 429: it waits out its Retry-After
    assert [r.outcome for r in server.request_log] == ["TooManyRequests"]
    assert not claim.done() and not bind.done()
    assert caller.open_groups == 1
    caller.on_delete(server.remove("Pod", "default", "p1"))
    withdrawn = outcome(claim)
    assert type(withdrawn) is CallCancelled
    # it says why, naming the claim first and then the group's cause, which it carries
    claim_ref = reserve(c1, pod).ref
    assert str(withdrawn).startswith(f"{claim_ref}: withdrawn: call group of ")
    assert "(owner_deleted)" in str(withdrawn) and "by caller" not in str(withdrawn)
    assert withdrawn.ref == claim_ref
    assert isinstance(withdrawn.cause, CallCancelled) and withdrawn.cause.ref == ObjectRef.of(pod)
    assert isinstance(outcome(bind), CallCancelled)  # DependencyFailed or the deletion's
    err = outcome(g.future)
    assert isinstance(err, GroupFailed) and err.cancelled == "owner_deleted"
    assert err.results == [outcome(claim), outcome(bind)]
    # nothing more reached the server
    assert [r.outcome for r in server.request_log] == ["TooManyRequests"]
    assert server.get_object("ResourceClaim", "default", "c1")["status"] == c1["status"]  # type: ignore[index]
    assert caller.open_groups == 0
    assert groups_cancelled(caller, "owner_deleted") == 1


def test_the_owners_deletion_is_the_cause_even_when_its_actor_resolves_a_step_first(
    server: InMemoryApiServer, caller: Dispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """on_delete: the owner's actor may resolve the held binding on the owner (the object
    deleted) before the informer's thread goes on. The group is cancelled for the deletion
    (``owner_deleted``), never for that step (``owner_withdrawn``): here the actor's turn ends
    before ``on_delete`` returns from telling it."""
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    server.script("patch_status", slow_429(), name="c1")
    g = caller.group(owner=pod)
    claim = g.submit(reserve(c1, pod))
    bind = g.submit(PodBinding.for_pod(pod, "n1"), after=[claim])
    attempted(server, "patch_status", "c1")
    registry = caller._registry
    tell = registry.tell

    def tell_then_wait_for_the_actor(uid: str, message: object, spawn: Any = None) -> bool:
        told = tell(uid, message, spawn)
        if type(message) is Deleted:
            assert isinstance(outcome(bind), CallCancelled)  # the actor handled the deletion
        return told

    monkeypatch.setattr(registry, "tell", tell_then_wait_for_the_actor)
    caller.on_delete(server.remove("Pod", "default", "p1"))
    err = outcome(g.future)
    assert isinstance(err, GroupFailed) and err.cancelled == "owner_deleted"
    assert g.cancelled == "owner_deleted"
    assert groups_cancelled(caller, "owner_deleted") == 1
    assert groups_cancelled(caller, "owner_withdrawn") == 0
    assert [r.outcome for r in server.request_log] == ["TooManyRequests"]


@pytest.mark.parametrize("how", ["preemption", "eviction"])
def test_owner_preemption_or_eviction_cancels_its_group(
    server: InMemoryApiServer, caller: Dispatcher, how: str
) -> None:
    """The owner preempted (deleted) or evicted: its group is cancelled (``owner_preempted``
    either way), its held binding and its claim patch waiting out a backoff are never sent."""
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    server.script("patch_status", slow_429(), name="c1")
    g = caller.group(owner=pod)
    claim = g.submit(reserve(c1, pod))
    bind = g.submit(PodBinding.for_pod(pod, "n1"), after=[claim])
    attempted(server, "patch_status", "c1")  # its 429: it waits out its Retry-After
    if how == "preemption":
        removed = caller.preempt(pod)
    else:
        removed = caller.submit(PodEviction.for_pod(pod))
    assert outcome(removed) is Outcome.SUCCESS
    assert isinstance(outcome(claim), CallCancelled)
    assert isinstance(outcome(bind), CallCancelled)
    assert g.cancelled == "owner_preempted"
    assert isinstance(outcome(g.future), GroupFailed)  # cancelled: sealed
    log = server.request_log
    assert requests(log, "bind", "p1") == [] and len(requests(log, "patch_status", "c1")) == 1
    assert server.get_object("Pod", "default", "p1") is None
    assert server.get_object("ResourceClaim", "default", "c1")["status"] == c1["status"]  # type: ignore[index]
    assert groups_cancelled(caller, "owner_preempted") == 1


def test_a_404_on_the_owner_cancels_the_group(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    server.script("patch_status", slow_429(), name="c1")
    g = caller.group(owner=pod)
    claim = g.submit(reserve(c1, pod))
    server.remove("Pod", "default", "p1")  # gone, and the informer has not said so yet
    status = g.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
    assert isinstance(outcome(status), ObjectNotFound)
    assert type(outcome(claim)) is CallCancelled
    assert g.cancelled == "owner_not_found"
    assert len(requests(server.request_log, "patch_status", "c1")) == 1
    assert groups_cancelled(caller, "owner_not_found") == 1


def test_a_step_on_the_owner_withdrawn_cancels_the_group(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    """The caller withdraws the group's step on its owner (``cancel``): the group goes with it,
    and the claim patch waiting out its backoff is never sent again."""
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    server.script("patch_status", slow_429(), name="c1")
    server.script("patch_status", slow_429(), name="p1")
    g = caller.group(owner=pod)
    claim = g.submit(reserve(c1, pod))
    nomination = g.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1"))
    attempted(server, "patch_status", "c1")
    attempted(server, "patch_status", "p1")  # both wait out their Retry-After
    caller.cancel(pod["metadata"]["uid"])
    assert type(outcome(nomination)) is CallCancelled
    assert type(outcome(claim)) is CallCancelled
    assert g.cancelled == "owner_withdrawn"
    err = outcome(g.future)
    assert isinstance(err, GroupFailed) and err.cancelled == "owner_withdrawn"
    assert [r.outcome for r in server.request_log] == ["TooManyRequests"] * 2
    assert server.get_object("ResourceClaim", "default", "c1")["status"] == c1["status"]  # type: ignore[index]
    assert "nominatedNodeName" not in server.get_object("Pod", "default", "p1")["status"]  # type: ignore[index]
    assert groups_cancelled(caller, "owner_withdrawn") == 1


def test_a_nomination_that_fails_for_good_sends_nothing_else(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """The preemption chain: the victims wait for the nomination and the binding for the
    victims; the nomination refused (422), no victim is deleted and the preemptor not bound."""
    preemptor = server.create(make_pod("pre"))
    victims = [server.create(make_pod(f"v{i}")) for i in range(3)]
    server.script("patch_status", InvalidRequestError("nomination refused"), name="pre")
    with dispatcher.group(owner=preemptor) as g:
        nomination = g.submit(PodStatusPatch.for_pod(preemptor, nominated_node_name="n1"))
        evicted = [g.preempt(v, preemptor="default/pre", after=[nomination]) for v in victims]
        bind = g.submit(PodBinding.for_pod(preemptor, "n1"), after=evicted)
    err = outcome(g.future)
    assert isinstance(err, GroupFailed) and err.error is outcome(nomination)
    assert isinstance(outcome(nomination), CallFailed)
    assert all(isinstance(outcome(f), DependencyFailed) for f in (*evicted, bind))
    assert [(r.op, r.name) for r in server.request_log] == [("patch_status", "pre")]
    assert all(server.get_object("Pod", "default", f"v{i}") is not None for i in range(3))
    assert "nodeName" not in server.get_object("Pod", "default", "pre")["spec"]  # type: ignore[index]


def test_a_held_call_is_admitted_at_once_and_view_shows_it(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    server.script("patch_status", slow_429(), name="c1")
    claim = caller.submit(reserve(c1, pod))
    attempted(server, "patch_status", "c1")
    bind = caller.submit(PodBinding.for_pod(pod, "n1"), after=[claim])
    seen = caller.view(pod["metadata"]["uid"])  # the actor admitted the held binding
    assert seen is not None and seen["spec"]["nodeName"] == "n1"
    assert not bind.done() and requests(server.request_log, "bind", "p1") == []
    assert "nodeName" not in server.get_object("Pod", "default", "p1")["spec"]  # type: ignore[index]


def test_group_failed_names_the_first_step_error_as_resolved_and_results_in_step_order(
    server: InMemoryApiServer,
) -> None:
    gated = GatedBackend(server, hold="c1")  # c1's request waits for the gate
    pod = server.create(make_pod("p1"))
    c1, c2 = server.create(make_claim("c1")), server.create(make_claim("c2"))
    server.script("patch_status", InvalidRequestError("c1 refused"), name="c1")
    server.script("patch_status", InvalidRequestError("c2 refused"), name="c2")
    with Dispatcher(gated, FAST) as d:
        with d.group(owner=pod) as g:
            first = g.submit(reserve(c1, pod))  # held at the gate
            second = g.submit(reserve(c2, pod))
        assert isinstance(outcome(second), CallFailed)  # resolved first
        assert not first.done()
        gated.gate.set()
        assert isinstance(outcome(first), CallFailed)
        err = outcome(g.future)
    assert isinstance(err, GroupFailed) and err.error is outcome(second)
    assert err.results == [outcome(first), outcome(second)]
    assert "c2 refused" in str(err)


def test_preemption_group_nominates_before_every_victim_is_deleted(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    preemptor = server.create(make_pod("pre"))
    victims = [server.create(make_pod(f"v{i}")) for i in range(5)]
    server.script("patch_status", "500", "429", name="pre")  # the nomination is retried twice
    with dispatcher.group(owner=preemptor) as g:
        nomination = g.submit(PodStatusPatch.for_pod(preemptor, nominated_node_name="n1"))
        deletes = [g.preempt(v, preemptor="default/pre", after=[nomination]) for v in victims]
    assert outcome(g.future) == [Outcome.SUCCESS] * 6
    log = server.request_log
    assert [log[i].outcome for i in requests(log, "patch_status", "pre")] == ["500", "429", "ok"]
    nominated = applied(log, "patch_status", "pre")
    for victim in victims:
        name = victim["metadata"]["name"]
        assert min(requests(log, "delete", name) + requests(log, "patch_status", name)) > nominated
        assert server.get_object("Pod", "default", name) is None
    assert all(f.result() is Outcome.SUCCESS for f in deletes)
    stored = server.get_object("Pod", "default", "pre")
    assert stored is not None and stored["status"]["nominatedNodeName"] == "n1"


def test_cancel_withdraws_pending_and_held_steps_only(server: InMemoryApiServer) -> None:
    gated = GatedBackend(server)
    gated.gate.clear()
    pod = server.create(make_pod("p1"))
    c1, c2 = server.create(make_claim("c1")), server.create(make_claim("c2"))
    with Dispatcher(gated, FAST) as d:
        earlier = d.submit(reserve(c2, server.create(make_pod("p0"))))  # not in the group
        g = d.group(owner=pod)
        on_wire = g.submit(reserve(c1, pod))
        gated.wait_calls(2)  # both claim patches in flight
        pending = g.submit(reserve(c2, pod))  # queued behind `earlier`
        held = g.submit(PodBinding.for_pod(pod, "n1"), after=[on_wire, pending])
        assert g.cancel() and not g.cancel()
        assert type(outcome(pending)) is CallCancelled
        assert isinstance(outcome(held), DependencyFailed)
        assert outcome(held).cause is g._cause
        late = g.submit(reserve(c1, pod))  # a cancelled group sends nothing more
        assert type(outcome(late)) is CallCancelled
        gated.gate.set()
        assert outcome(on_wire) is Outcome.SUCCESS and outcome(earlier) is Outcome.SUCCESS
        err = outcome(g.future)
        assert isinstance(err, GroupFailed) and err.cancelled == "caller"
        assert err.results[:3] == [Outcome.SUCCESS, outcome(pending), outcome(held)]
    log = server.request_log
    assert requests(log, "bind", "p1") == []
    assert len(requests(log, "patch_status", "c2")) == 1
    assert len(requests(log, "patch_status", "c1")) == 1
    assert groups_cancelled(d, "caller") == 1


def reserved(server: InMemoryApiServer, claim: str) -> set[str]:
    """The names of the pods the claim is reserved for, as stored."""
    stored = server.get_object("ResourceClaim", "default", claim)
    assert stored is not None
    return {r["name"] for r in stored.get("status", {}).get("reservedFor") or []}


@pytest.mark.parametrize("fault", ["429", "500", "409", "apply_then_fail"])
def test_cancel_withdraws_the_step_on_the_wire_from_retries_and_spares_a_later_call(
    server: InMemoryApiServer, fault: str
) -> None:
    """The group's claim patch is on the wire when the group is cancelled, and then fails
    retryably (or meets a 409): it is not sent again. Another pod's reservation of the same
    claim (the same call type), submitted after it, stays and lands."""
    gated = GatedBackend(server)
    gated.gate.clear()
    p0, p1 = server.create(make_pod("p0")), server.create(make_pod("p1"))
    c1 = server.create(make_claim("c1"))
    server.script("patch_status", fault, name="c1")
    with Dispatcher(gated, FAST) as d:
        g = d.group(owner=p1)
        mine = g.submit(reserve(c1, p1))
        gated.wait_calls(1)  # on the wire
        theirs = d.submit(reserve(c1, p0))  # pending behind it: same object, same type
        assert g.cancel()
        gated.gate.set()
        assert type(outcome(mine)) is CallCancelled
        assert "withdrawn while in flight: call group of " in str(outcome(mine))
        assert "(caller)" in str(outcome(mine))
        assert outcome(theirs) is Outcome.SUCCESS
        assert isinstance(outcome(g.future), GroupFailed)
    log = server.request_log
    patches = requests(log, "patch_status", "c1")
    assert [log[i].outcome == "ok" for i in patches] == [False, True]  # mine once, theirs once
    # a lost reply applied the withdrawn patch; any other fault did not
    assert reserved(server, "c1") == ({"p0", "p1"} if fault == "apply_then_fail" else {"p0"})


def test_cancelling_the_group_whose_step_merged_another_sends_the_others_intent(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    """p2's reservation merges p1's (pending in backoff): cancelling p2's group leaves p1's
    intent in the merged call, which is sent whole; p1's held binding follows it and lands."""
    p1, p2 = server.create(make_pod("p1")), server.create(make_pod("p2"))
    shared = server.create(make_claim("shared"))
    server.script("patch_status", TooManyRequestsError("later", retry_after=0.2), name="shared")
    g1, g2 = caller.group(owner=p1), caller.group(owner=p2)
    s1 = g1.submit(reserve(shared, p1))
    b1 = g1.submit(PodBinding.for_pod(p1, "n1"), after=[s1])
    attempted(server, "patch_status", "shared")
    s2 = g2.submit(reserve(shared, p2))  # merges s1 in (or s1, put back, merges into it)
    assert outcome(s1) is Outcome.OVERWRITTEN and s1.successor is s2
    assert g2.cancel()
    assert outcome(b1) is Outcome.SUCCESS
    assert outcome(s2) is Outcome.SUCCESS  # it carried p1's intent: sent whole
    log = server.request_log
    assert applied(log, "bind", "p1") > applied(log, "patch_status", "shared")
    assert len(requests(log, "patch_status", "shared")) == 2
    assert reserved(server, "shared") == {"p1", "p2"}


def test_two_steps_of_a_cancelled_group_merged_together_are_withdrawn_together(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    p1, p2 = server.create(make_pod("p1")), server.create(make_pod("p2"))
    c1 = server.create(make_claim("c1"))
    server.script("patch_status", slow_429(), name="c1")
    g = caller.group(owner=p1)
    first = g.submit(reserve(c1, p1))  # meets its 429: pending in backoff
    attempted(server, "patch_status", "c1")
    second = g.submit(reserve(c1, p2))  # merges the first in
    assert outcome(first) is Outcome.OVERWRITTEN and first.successor is second
    other = caller.submit(PodStatusPatch.for_pod(p2, nominated_node_name="n1"))
    assert g.cancel()
    assert type(outcome(second)) is CallCancelled
    assert outcome(other) is Outcome.SUCCESS
    assert [r.outcome for r in server.request_log if r.name == "c1"] == ["TooManyRequests"]
    assert reserved(server, "c1") == set()


def test_a_plain_future_merged_before_it_became_a_prerequisite_is_followed(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    """No group watched it: the actor names the call that merged it, so a binding submitted
    after the merge still waits for the reservation to land."""
    p1, p2 = server.create(make_pod("p1")), server.create(make_pod("p2"))
    shared = server.create(make_claim("shared"))
    server.script("patch_status", TooManyRequestsError("later", retry_after=1.0), name="shared")
    f1 = caller.submit(reserve(shared, p1))
    attempted(server, "patch_status", "shared")
    f2 = caller.submit(reserve(shared, p2))  # merges f1 in
    assert outcome(f1) is Outcome.OVERWRITTEN and f1.successor is f2
    bind = caller.submit(PodBinding.for_pod(p1, "n1"), after=[f1])
    assert not bind.done() and caller.held_calls == 1  # held on f2, not released by f1
    assert outcome(bind) is Outcome.SUCCESS and outcome(f2) is Outcome.SUCCESS
    log = server.request_log
    assert applied(log, "bind", "p1") > applied(log, "patch_status", "shared")
    assert reserved(server, "shared") == {"p1", "p2"}


def test_a_group_future_whose_step_was_merged_away_is_followed_to_the_merged_call(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    """p1's group reserves the shared claim; its step merges into p2's reservation (the step
    resolves OVERWRITTEN, the group with it). A binding held on the group's future waits for
    the merged reservation to land, as it would for the step itself."""
    p1, p2 = server.create(make_pod("p1")), server.create(make_pod("p2"))
    shared = server.create(make_claim("shared"))
    server.script("patch_status", TooManyRequestsError("later", retry_after=0.5), name="shared")
    with caller.group(owner=p1) as claims:
        mine = claims.submit(reserve(shared, p1))
    attempted(server, "patch_status", "shared")
    theirs = caller.submit(reserve(shared, p2))  # merges mine in
    assert outcome(mine) is Outcome.OVERWRITTEN and mine.successor is theirs
    assert outcome(claims.future) == [Outcome.OVERWRITTEN]
    bind = caller.submit(PodBinding.for_pod(p1, "n1"), after=[claims.future])
    assert outcome(bind) is Outcome.SUCCESS and outcome(theirs) is Outcome.SUCCESS
    log = server.request_log
    assert applied(log, "bind", "p1") > applied(log, "patch_status", "shared")
    assert reserved(server, "shared") == {"p1", "p2"}
    assert caller.held_calls == 0


def test_a_group_future_whose_merged_step_fails_fails_the_held_call(
    server: InMemoryApiServer, caller: Dispatcher
) -> None:
    """The call that carries the group's merged step fails for good: the call held on the
    group's future resolves DependencyFailed with that error, and is not sent."""
    p1, p2 = server.create(make_pod("p1")), server.create(make_pod("p2"))
    shared = server.create(make_claim("shared"))
    server.script(
        "patch_status",
        TooManyRequestsError("later", retry_after=0.5),
        InvalidRequestError("refused"),
        name="shared",
    )
    with caller.group(owner=p1) as claims:
        mine = claims.submit(reserve(shared, p1))
    attempted(server, "patch_status", "shared")
    theirs = caller.submit(reserve(shared, p2))  # merges mine in
    assert outcome(mine) is Outcome.OVERWRITTEN
    bind = caller.submit(PodBinding.for_pod(p1, "n1"), after=[claims.future])
    failed = outcome(bind)
    assert isinstance(failed, DependencyFailed) and failed.cause is outcome(theirs)
    assert requests(server.request_log, "bind", "p1") == []
    assert caller.held_calls == 0


def test_group_future_lists_outcomes_and_is_a_prerequisite(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod = server.create(make_pod("p1"))
    claims = [server.create(make_claim(f"c{i}")) for i in range(3)]
    with dispatcher.group(owner=pod) as claims_group:
        for claim in claims:
            claims_group.submit(reserve(claim, pod))
    bind = dispatcher.submit(PodBinding.for_pod(pod, "n1"), after=[claims_group.future])
    assert outcome(bind) is Outcome.SUCCESS
    assert outcome(claims_group.future) == [Outcome.SUCCESS] * 3
    log = server.request_log
    assert all(applied(log, "bind", "p1") > applied(log, "patch_status", f"c{i}") for i in range(3))
    with pytest.raises(GroupClosedError):
        claims_group.submit(reserve(claims[0], pod))
    assert dispatcher.open_groups == 0
    assert dispatcher.metrics.value("kdispatch_call_groups_open") == 0


def test_an_empty_group_resolves_when_sealed(dispatcher: Dispatcher) -> None:
    group = dispatcher.group(owner=make_pod("p1"))
    assert isinstance(group, CallGroup) and not group.future.done()
    group.seal()
    assert group.future.result(timeout=5) == []


def test_a_group_for_a_deleted_owner_starts_cancelled(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    dispatcher.on_delete(pod)
    g = dispatcher.group(owner=pod)
    assert g.cancelled == "owner_deleted"
    assert type(outcome(g.submit(reserve(c1, pod)))) is CallCancelled
    assert server.request_log == []


def test_asyncio_forms_take_and_give_prerequisites(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("p1"))
    pre, victim = server.create(make_pod("pre")), server.create(make_pod("v1"))
    c1 = server.create(make_claim("c1"))
    server.script("patch_status", "429", name="c1")

    async def main(d: Dispatcher) -> list[Any]:
        claim = d.asubmit(reserve(c1, pod))
        bind = d.asubmit(PodBinding.for_pod(pod, "n1"), after=[claim])
        g = d.group(owner=pre)
        nomination = g.asubmit(PodStatusPatch.for_pod(pre, nominated_node_name="n1"))
        delete = g.apreempt(victim, preemptor="default/pre", after=[nomination])
        g.seal()
        return list(await asyncio.gather(claim, bind, nomination, delete))

    with Dispatcher(server, FAST) as d:
        assert asyncio.run(main(d)) == [Outcome.SUCCESS] * 4
    log = server.request_log
    assert applied(log, "bind", "p1") > applied(log, "patch_status", "c1")
    assert applied(log, "delete", "v1") > applied(log, "patch_status", "pre")


# --------------------------------------------------------------------------- cut short


def test_revoke_resolves_every_step_once_and_sends_nothing_after(
    server: InMemoryApiServer,
) -> None:
    gated = GatedBackend(server)
    gated.gate.clear()
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    victim = server.create(make_pod("v1"))
    open_gate = threading.Event()
    open_gate.set()
    with Dispatcher(gated, FAST, send_gate=open_gate.is_set) as d:
        g = d.group(owner=pod)
        claim = g.submit(reserve(c1, pod))
        gated.wait_calls(1)  # on the wire
        bind = g.submit(PodBinding.for_pod(pod, "n1"), after=[claim])
        delete = g.preempt(victim, after=[bind])
        open_gate.clear()
        d.revoke(LeadershipLost("lease lost"))
        assert isinstance(outcome(bind), LeadershipLost)
        assert isinstance(outcome(delete), LeadershipLost)
        with pytest.raises(LeadershipLost):
            g.submit(reserve(c1, pod))
        with pytest.raises(LeadershipLost):
            d.group(owner=pod)
        gated.gate.set()
        assert outcome(claim) is Outcome.SUCCESS  # it was on the wire: it finishes
        err = outcome(g.future)
        assert isinstance(err, GroupFailed) and isinstance(err.error, LeadershipLost)
        assert err.results == [Outcome.SUCCESS, outcome(bind), outcome(delete)]
        stats = d.stats()["outcomes"]
    assert stats == {
        "claim_status_patch:success": 1,
        "pod_binding:closed": 1,
        "pod_preemption:closed": 1,
    }
    assert [(r.op, r.name) for r in server.request_log] == [("patch_status", "c1")]


def test_stop_resolves_a_group_cut_short(server: InMemoryApiServer) -> None:
    pod, c1 = server.create(make_pod("p1")), server.create(make_claim("c1"))
    server.script("patch_status", slow_429(), name="c1")
    d = Dispatcher(server, FAST).start()
    g = d.group(owner=pod)  # never sealed: stop seals it
    claim = g.submit(reserve(c1, pod))
    bind = g.submit(PodBinding.for_pod(pod, "n1"), after=[claim])
    attempted(server, "patch_status", "c1")
    assert not d.stop(drain=False, timeout=5)
    assert isinstance(outcome(claim), DispatcherClosed)
    assert isinstance(outcome(bind), DispatcherClosed | DependencyFailed)
    assert isinstance(outcome(g.future), GroupFailed)
    assert [r.outcome for r in server.request_log] == ["TooManyRequests"]
    assert d.outstanding == 0 and d.open_groups == 0 and d.held_calls == 0


@pytest.mark.parametrize("closing", ["stop", "revoke"])
def test_a_group_built_while_the_dispatcher_closes_is_refused_not_left_open(
    server: InMemoryApiServer, monkeypatch: pytest.MonkeyPatch, closing: str
) -> None:
    """``stop()``/``revoke()`` runs between ``group()``'s check that the dispatcher is open and
    the group's indexing (where ``stop`` seals the open groups): ``group()`` raises, and no
    group is left open for good (its future unresolved, the gauge at 1)."""
    owner = server.create(make_pod("owner"))
    d = Dispatcher(server, FAST).start()
    index = d._owners
    add = index.add

    def add_once_closed(group: CallGroup) -> None:
        closer = threading.Thread(
            target=d.stop if closing == "stop" else partial(d.revoke, LeadershipLost("lost"))
        )
        closer.start()
        closer.join(timeout=10)
        add(group)

    monkeypatch.setattr(index, "add", add_once_closed)
    try:
        with pytest.raises(DispatcherClosed):
            d.group(owner=owner)
        assert d.open_groups == 0
        assert d.metrics.value("kdispatch_call_groups_open") == 0
    finally:
        d.stop(timeout=5)


# --------------------------------------------------------------------------- under load


@pytest.mark.slow
def test_two_thousand_groups_keep_their_order_under_throttling_and_faults() -> None:
    from kdispatch.testing.memory import FaultPlan

    n = 2000
    server = InMemoryApiServer(
        faults=FaultPlan(
            rate=0.05,
            weights={"429": 1.0, "500": 1.0, "apply_then_fail": 1.0},
            retry_after=0.01,
            ops=frozenset({"patch_status", "bind"}),
        ),
        seed=11,
    )
    gated = GatedBackend(server)
    gated.gate.clear()  # nothing completes until every group is in flight
    pods = [server.create(make_pod(f"p{i}")) for i in range(n)]
    claims = [server.create(make_claim(f"c{i}")) for i in range(n)]
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=1500.0, burst=10),
        retry=RetryConfig(base_backoff=0.001, max_backoff=0.05),
    )
    with Dispatcher(gated, config) as d:
        groups = []
        for pod, claim in zip(pods, claims, strict=True):
            with d.group(owner=pod) as g:
                step = g.submit(reserve(claim, pod))
                g.submit(PodBinding.for_pod(pod, "n1"), after=[step])
            groups.append(g)
        assert d.open_groups == n and d.held_calls == n
        assert d.metrics.value("kdispatch_held_calls", call_type="pod_binding") == n
        gated.gate.set()
        results = [outcome(g.future) for g in groups]
        assert d.open_groups == 0 and d.held_calls == 0
    # a claim patch whose reply was lost and that finds itself applied is SKIPPED (a success)
    assert all(isinstance(r, list) and len(r) == 2 for r in results), results
    assert {o for r in results for o in r} <= {Outcome.SUCCESS, Outcome.SKIPPED}
    log = server.request_log
    assert sum(1 for r in log if r.outcome != "ok") > 50  # faults did happen
    claimed: dict[str, int] = {}
    for i, r in enumerate(log):
        if r.op == "patch_status" and r.outcome in ("ok", "apply_then_fail"):
            claimed.setdefault(r.name, i)
    # (a retry of a lost reply is logged apply_then_fail too when its apply failed: the first
    # such record of an object is the one that applied)
    bound: dict[str, int] = {}
    for i, r in enumerate(log):
        if r.op == "bind" and r.outcome in ("ok", "apply_then_fail"):
            bound.setdefault(r.name, i)
    assert len(bound) == n and len(claimed) == n
    for name, i in bound.items():
        assert claimed["c" + name[1:]] < i, f"{name} bound before its claim"
    stored = [server.get_object("Pod", "default", f"p{i}") or {} for i in range(n)]
    assert all(pod["spec"]["nodeName"] == "n1" for pod in stored)


# --------------------------------------------------------------------------- elsewhere


def test_process_dispatcher_refuses_prerequisites_and_groups() -> None:
    from kdispatch.actors.facade.process import ProcessDispatcher

    pd = ProcessDispatcher(InMemoryApiServer)  # never started: refused before anything
    pod = make_pod("p1")
    with pytest.raises(GroupsNotSupported):
        pd.submit(PodBinding.for_pod(pod, "n1"), after=[CallFuture()])
    with pytest.raises(GroupsNotSupported):
        pd.preempt(pod, after=[CallFuture()])
    with pytest.raises(GroupsNotSupported):
        pd.group(owner=pod)


def test_the_group_future_waits_to_be_asked_for(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pods = [server.create(make_pod(f"p{i}")) for i in range(2)]
    g = dispatcher.group(owner=pods[0])
    steps = [g.submit(PodStatusPatch.for_pod(p, nominated_node_name="n1")) for p in pods]
    assert g._future is None  # nobody asked: not built
    g.seal()
    assert outcome(g.future) == [Outcome.SUCCESS, Outcome.SUCCESS]
    assert all(s.done() for s in steps)
    assert dispatcher.open_groups == 0
    stored = server.get_object("Pod", "default", "p0")
    assert stored is not None and stored["status"]["nominatedNodeName"] == "n1"
