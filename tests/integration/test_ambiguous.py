"""Ambiguous outcomes: the request landed on the server but its reply was lost.

Each case runs against the in-memory apiserver (scripted ``apply_then_fail``: applied, then a
timeout) and, where marked, through the official client over HTTP (applied, then answered with
the apiserver's own ``504 Timeout``, which does not say whether the request took effect). The
dispatcher must recognise the landed request instead of doing it twice or reporting a failure:

* a binding is retried and the "already bound" answer for the *same* node counts as success;
* a deletion is retried and NotFound counts as success;
* a status patch is not re-sent once the informer shows it applied, and without an informer
  the retry reads the object first and finds nothing left to do;
* after a lost reply the object observed before the request is not trusted for no-op checks,
  so a newer call that restores the earlier value is still sent.

Several of these pin fixes of defects these tests first exposed (noted per test).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kdispatch.actors.engine.messages import CallFuture
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.facade.event_recorder import EventRecorder
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.claim_calls import ClaimStatusPatch
from kdispatch.actors.model.config import DispatcherConfig
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallConflict,
    CallFailed,
    ObjectNotFound,
    Outcome,
    RequestTimeoutError,
    TooManyRequestsError,
)
from kdispatch.actors.model.objects import Obj
from kdispatch.actors.model.pod_calls import PodBinding, PodPreemption, PodStatusPatch
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_claim, make_pod
from tests.backends import GatedBackend, T, WrappedBackend
from tests.configs import fast

pytestmark = pytest.mark.timeout(30)

ATTEMPTS = 6
CONFIG = fast(max_attempts=ATTEMPTS, base_backoff=0.01, max_backoff=0.01)
UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/3 nodes are available",
}


def _reply_lost(server: InMemoryApiServer, op: str, name: str) -> Obj:
    """Creates pod ``name``; its first ``op`` request lands, and its reply is lost."""
    pod = server.create(make_pod(name))
    server.script(op, "apply_then_fail", name=name)
    return pod


@pytest.fixture(params=["memory", "http"])
def backend(request: pytest.FixtureRequest, server: InMemoryApiServer) -> Iterator[ApiBackend]:
    """The in-memory apiserver itself, or the official client talking to it over HTTP.

    Over HTTP the lost reply is a 504 the server sends at once, not a reply withheld until the
    client's read timeout fires: with a read timeout short enough to lose one reply, a loaded
    machine also lost replies the server did send (a re-read answered late counted as a second
    GET). Every request now has a generous timeout, and only the scripted reply is lost. (The
    client's own read timeout is covered by test_kubernetes_backend and test_chaos.)"""
    if request.param == "memory":
        yield server
        return
    with (
        ApiServerHTTP(server, timeout_reply="504") as http,
        KubernetesBackend.for_url(http.url, request_timeout=10.0) as kbackend,
    ):
        yield kbackend


def ops(server: InMemoryApiServer, op: str) -> list[str]:
    """Outcomes of the ``op`` requests as the server saw them, in order."""
    return [r.outcome for r in server.request_log if r.op == op]


def uid(obj: Obj) -> str:
    return str(obj["metadata"]["uid"])


# --------------------------------------------------------------------------- bindings


def test_lost_binding_reply_is_recognised_by_already_bound_to_the_same_node(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    pod = _reply_lost(server, "bind", "p1")
    with Dispatcher(backend, CONFIG) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10) is Outcome.SUCCESS
        stats = d.stats()
    # the first request landed (reply lost); the retry met "already bound" and a read showed
    # the same node: one binding on the server, none repeated, no failure reported
    assert ops(server, "bind") == ["apply_then_fail", "Conflict"]
    assert ops(server, "get") == ["ok"]
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["spec"]["nodeName"] == "n1"
    assert stats["retries"] == {"pod_binding:timeout": 1}
    assert stats["outcomes"] == {"pod_binding:success": 1}


def test_a_throttled_read_after_the_409_is_waited_out_and_the_landed_binding_succeeds(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    """The first binding lands, its reply lost; the retry meets "already bound" (409), and
    the GET after it is throttled (429 with a Retry-After) twice: the call backs off as after a
    failure of its own and goes again, until a read shows the pod bound to this node. It used
    to go again at once, count each throttled read as a conflict and resolve ``CallConflict``
    for a binding that had landed."""
    pod = _reply_lost(server, "bind", "p1")
    throttled = [TooManyRequestsError("throttled", retry_after=0.02) for _ in range(2)]
    server.script("get", *throttled, name="p1")
    with Dispatcher(backend, CONFIG) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10) is Outcome.SUCCESS
        stats = d.stats()
    assert ops(server, "bind") == ["apply_then_fail", "Conflict", "Conflict", "Conflict"]
    assert ops(server, "get") == ["TooManyRequests", "TooManyRequests", "ok"]
    assert stats["retries"] == {"pod_binding:timeout": 1, "pod_binding:429": 2}
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["spec"]["nodeName"] == "n1"


def test_a_binding_that_landed_then_met_5xx_until_its_retries_ran_out_resolves_success(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    """The first binding lands, its reply lost; every retry is answered 500 until the
    retries run out. An answer on the last attempts does not say the first did not land: the
    pod is read once, bound to this node, so the binding succeeded (it used to resolve
    ``CallFailed``)."""
    pod = _reply_lost(server, "bind", "p1")
    server.script("bind", *["500"] * (ATTEMPTS - 1), name="p1")
    with Dispatcher(backend, CONFIG) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10) is Outcome.SUCCESS
    assert ops(server, "bind") == ["apply_then_fail", *["500"] * (ATTEMPTS - 1)]
    assert ops(server, "get") == ["ok"]
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["spec"]["nodeName"] == "n1"


class _FirstReplyLost(GatedBackend):
    """The first ``op`` request is replaced by ``meanwhile(request, send)`` (which may send it
    and change the server), and its reply is lost: it raises a timeout."""

    def __init__(
        self,
        inner: InMemoryApiServer,
        op: str,
        meanwhile: Callable[[dict[str, Any], Callable[[], Any]], object],
    ) -> None:
        super().__init__(inner)
        self.op, self.meanwhile, self.first = op, meanwhile, True

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        if op == self.op and self.first:
            self.first = False
            self.meanwhile(request, send)
            raise RequestTimeoutError("reply lost")
        return super().around(op, request, send)


def _rival_binds(server: InMemoryApiServer) -> _FirstReplyLost:
    """The first binding times out before it lands, and meanwhile another scheduler binds the
    pod to ``rival``."""
    return _FirstReplyLost(server, "bind", lambda req, _: server.bind(**dict(req, node="rival")))


def test_lost_binding_reply_with_the_pod_bound_elsewhere_is_a_conflict(
    server: InMemoryApiServer,
) -> None:
    pod = server.create(make_pod("p1"))
    with Dispatcher(_rival_binds(server), CONFIG) as d, pytest.raises(CallConflict):
        d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10)
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["spec"]["nodeName"] == "rival"
    assert ops(server, "bind") == ["ok", "Conflict"]  # the rival's, then our retry


# --------------------------------------------------------------------------- deletions


@pytest.mark.parametrize("add_condition", [True, False])
def test_lost_deletion_reply_is_recognised_by_not_found(
    server: InMemoryApiServer, backend: ApiBackend, add_condition: bool
) -> None:
    pod = _reply_lost(server, "delete", "victim")
    with Dispatcher(backend, CONFIG) as d:
        preemption = PodPreemption.for_pod(
            pod, preemptor="default/vip", add_condition=add_condition
        )
        assert d.submit(preemption).result(timeout=10) is Outcome.SUCCESS
        # the victim's actor retired: a late call for it is cancelled, never sent
        with pytest.raises(CallCancelled):
            d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10)
    assert server.get_object("Pod", "default", "victim") is None
    assert ops(server, "bind") == []
    # after the ambiguous reply the retry re-reads the pod before sending anything: the read
    # meets NotFound, and the preemption has done its job (no second patch, no second delete)
    assert ops(server, "patch_status") == (["ok"] if add_condition else [])
    assert ops(server, "delete") == ["apply_then_fail"]
    assert ops(server, "get") == ["NotFound"]


def _recreated_after_delete(server: InMemoryApiServer) -> _FirstReplyLost:
    """The first deletion lands but its reply is lost, and a new pod with the same name (another
    UID) is created before the retry."""

    def meanwhile(request: dict[str, Any], send: Callable[[], Any]) -> None:
        send()
        server.create(make_pod(request["name"]))

    return _FirstReplyLost(server, "delete", meanwhile)


def test_retried_deletion_never_hits_a_recreated_pod_of_the_same_name(
    server: InMemoryApiServer,
) -> None:
    victim = server.create(make_pod("p1"))
    with Dispatcher(_recreated_after_delete(server), CONFIG) as d:
        future = d.submit(PodPreemption.for_pod(victim, add_condition=False))
        exc = future.exception(timeout=10)
        assert exc is None or isinstance(exc, ObjectNotFound)
    newcomer = server.get_object("Pod", "default", "p1")
    assert newcomer is not None and uid(newcomer) != uid(victim)
    # the retry re-read the name first, found another UID and sent no second deletion (had
    # it been sent, it would carry the victim's UID and be refused)
    assert [r.outcome for r in server.request_log if r.op == "delete"] == ["ok"]
    assert [r.outcome for r in server.request_log if r.op == "get"] == ["ok"]


def test_retried_deletion_whose_victim_was_replaced_reports_success(
    server: InMemoryApiServer,
) -> None:
    """Regression: the refetch after the 409 finds another UID, which once surfaced as
    ObjectNotFound; for a preemption the victim being gone is success."""
    victim = server.create(make_pod("p1"))
    with Dispatcher(_recreated_after_delete(server), CONFIG) as d:
        future = d.submit(PodPreemption.for_pod(victim, add_condition=False))
        assert future.result(timeout=10) is Outcome.SUCCESS


# --------------------------------------------------------------------------- status patches


class _HoldAfterApply(GatedBackend):
    """``patch_status`` reaches the server, then waits for ``release`` before its result (or
    error) goes back to the executor: the test acts while the reply is "on its way"."""

    def __init__(self, inner: InMemoryApiServer) -> None:
        super().__init__(inner)
        self.applied = threading.Event()
        self.release = threading.Event()

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        if op != "patch_status":
            return super().around(op, request, send)
        try:
            return super().around(op, request, send)
        finally:
            self.applied.set()
            assert self.release.wait(timeout=20), "never released"


def _informer_shows(server: InMemoryApiServer, d: Dispatcher, name: str) -> None:
    """The watch event of pod ``name`` as the server holds it now reaches the dispatcher."""
    applied = server.get_object("Pod", "default", name)
    assert applied is not None
    d.on_update(applied)


def _with_backoff(seconds: float) -> DispatcherConfig:
    """:data:`CONFIG` with six attempts ``seconds`` apart."""
    return fast(max_attempts=6, base_backoff=seconds, max_backoff=seconds)


def test_lost_status_patch_reply_is_not_resent_once_the_informer_shows_it(
    server: InMemoryApiServer,
) -> None:
    pod = _reply_lost(server, "patch_status", "p1")
    held = _HoldAfterApply(server)
    with Dispatcher(held, CONFIG) as d:
        future = d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE]))
        assert held.applied.wait(timeout=10)
        # the watch event of the applied patch arrives before the lost reply times out
        _informer_shows(server, d, "p1")
        held.release.set()
        assert future.result(timeout=10) is Outcome.SKIPPED
        assert d.stats()["sent_total"] == 1
    assert ops(server, "patch_status") == ["apply_then_fail"]  # never re-sent
    assert ops(server, "get") == []


def test_lost_status_patch_reply_is_not_resent_whether_the_event_or_the_timeout_comes_first(
    server: InMemoryApiServer,
) -> None:
    """The informer event arrives around the time the reply is lost: if the actor already
    requeued the call it is dropped at once, else it is dropped when its retry is due."""
    pod = _reply_lost(server, "patch_status", "p1")
    gated = GatedBackend(server)
    slow = _with_backoff(0.5)
    with Dispatcher(gated, slow) as d:
        future = d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE]))
        gated.wait_calls(1)
        _informer_shows(server, d, "p1")
        assert future.result(timeout=10) is Outcome.SKIPPED
    assert ops(server, "patch_status") == ["apply_then_fail"]


def test_lost_status_patch_reply_resolves_without_waiting_out_the_backoff(
    server: InMemoryApiServer,
) -> None:
    """Regression: a call the informer showed applied while it was in flight once waited out
    its whole backoff (30 s here) before resolving."""
    pod = _reply_lost(server, "patch_status", "p1")
    held = _HoldAfterApply(server)
    slow = _with_backoff(30.0)
    d = Dispatcher(held, slow).start()
    try:
        future = d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE]))
        assert held.applied.wait(timeout=10)
        _informer_shows(server, d, "p1")
        held.release.set()
        assert future.result(timeout=3) is Outcome.SKIPPED
    finally:
        held.release.set()
        d.stop(drain=False, timeout=5)


def test_lost_status_patch_reply_without_informer_is_recognised_not_repeated(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    pod = _reply_lost(server, "patch_status", "p1")
    with Dispatcher(backend, CONFIG) as d:
        future = d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE]))
        assert future.result(timeout=10) in (Outcome.SUCCESS, Outcome.SKIPPED)
    # the retry read the object (before sending, or after a 409 on the old resourceVersion)
    # and found nothing left to send: the patch was applied exactly once
    assert ops(server, "patch_status") in (["apply_then_fail"], ["apply_then_fail", "Conflict"])
    assert ops(server, "get") == ["ok"]
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None
    scheduled = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert len(scheduled) == 1 and scheduled[0]["message"] == UNSCHEDULABLE["message"]


def test_lost_claim_reservation_reply_does_not_reserve_twice(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    claim = server.create(make_claim("c1"))
    consumer = {"resource": "pods", "name": "p1", "uid": "pod-uid-1"}
    server.script("patch_status", "apply_then_fail", name="c1")
    with Dispatcher(backend, CONFIG) as d:
        future = d.submit(ClaimStatusPatch.for_claim(claim, reserve=[consumer]))
        assert future.result(timeout=10) in (Outcome.SUCCESS, Outcome.SKIPPED)
    stored = server.get_object("ResourceClaim", "default", "c1")
    assert stored is not None
    assert stored["status"]["reservedFor"] == [consumer]  # once, not twice
    assert ops(server, "patch_status") in (["apply_then_fail"], ["apply_then_fail", "Conflict"])


@pytest.mark.parametrize("kind", ["pod", "claim"])
def test_call_restoring_the_previous_value_after_a_lost_reply_is_not_elided(
    server: InMemoryApiServer, kind: str
) -> None:
    """Regression (found by the chaos run over HTTP): the actor once elided the restoring call
    as a no-op against the object observed before the lost request, answering SKIPPED while
    the server kept the lost request's value."""
    held = _HoldAfterApply(server)
    held.release.set()
    consumer = {"resource": "pods", "name": "p1", "uid": "pod-uid-1"}
    first: PodStatusPatch | None = None
    lost: PodStatusPatch | ClaimStatusPatch
    restore: PodStatusPatch | ClaimStatusPatch
    if kind == "pod":
        obj = server.create(make_pod("p1"))
        a, b = (dict(UNSCHEDULABLE, message=m) for m in ("a", "b"))
        first = PodStatusPatch.for_pod(obj, conditions=[b])
        lost = PodStatusPatch.for_pod(obj, conditions=[a])
        restore = PodStatusPatch.for_pod(obj, conditions=[b])
    else:
        obj = server.create(make_claim("c1"))
        lost = ClaimStatusPatch.for_claim(obj, reserve=[consumer])
        restore = ClaimStatusPatch.for_claim(obj, unreserve=[consumer["uid"]])
    name = obj["metadata"]["name"]
    with Dispatcher(held, CONFIG) as d:
        if first is not None:
            assert d.submit(first).result(timeout=10) is Outcome.SUCCESS
        held.release.clear()
        held.applied.clear()
        server.script("patch_status", "apply_then_fail", name=name)
        lost_future = d.submit(lost)
        assert held.applied.wait(timeout=10)  # landed on the server; the reply is on hold
        restore_future = d.submit(restore)
        held.release.set()  # ... and now it is lost
        assert lost_future.result(timeout=10) is Outcome.OVERWRITTEN
        outcome = restore_future.result(timeout=10)
    stored = server.get_object("Pod" if kind == "pod" else "ResourceClaim", "default", name)
    assert stored is not None
    assert outcome in (Outcome.SUCCESS, Outcome.SKIPPED)
    # a success must mean the server holds the restored value
    if kind == "pod":
        [scheduled] = stored["status"]["conditions"]
        assert scheduled["message"] == "b"
    else:
        assert not stored["status"].get("reservedFor")


# --------------------------------------------------------------------------- no answer at all

UNANSWERED = ATTEMPTS - 1  # the attempts after the first, all unanswered
"""Every attempt after the first times out too: the retries run out without an answer."""


def test_binding_that_landed_while_every_reply_was_lost_resolves_success(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    """The first binding lands and its reply is lost; every retry times out as well (a
    client timeout shorter than the server's answer). Before it gives up, the call reads the
    pod once: bound to this node, so the binding landed (it used to resolve ``CallFailed:
    gave up after 6 failed requests``, and a scheduler trusting that would bind again)."""
    pod = _reply_lost(server, "bind", "p1")
    server.script("bind", *["timeout"] * UNANSWERED, name="p1")
    with Dispatcher(backend, CONFIG) as d:
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10) is Outcome.SUCCESS
        stats = d.stats()
    assert ops(server, "bind") == ["apply_then_fail", *["timeout"] * UNANSWERED]
    assert ops(server, "get") == ["ok"]  # one read, charged a token like any request
    assert stats["tokens_taken"] == ATTEMPTS + 1
    assert stats["outcomes"] == {"pod_binding:success": 1}
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["spec"]["nodeName"] == "n1"


def _failing_every_bind(server: InMemoryApiServer, fault: str) -> dict[str, Any]:
    """Pod p1, every binding attempt of which the server answers with ``fault``."""
    pod = server.create(make_pod("p1"))
    server.script("bind", *[fault] * ATTEMPTS, name="p1")
    return pod


def _binding_error(backend: ApiBackend, pod: object) -> BaseException | None:
    """Bind ``pod`` to n1 through a dispatcher with :data:`CONFIG`: what the call raised."""
    with Dispatcher(backend, CONFIG) as d:
        return d.submit(PodBinding.for_pod(pod, "n1")).exception(timeout=10)


def test_binding_that_never_landed_fails_saying_the_pod_shows_it(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    exc = _binding_error(backend, _failing_every_bind(server, "timeout"))
    assert isinstance(exc, CallFailed) and isinstance(exc.cause, RequestTimeoutError)
    assert "gave up after 6 failed requests" in str(exc)
    assert "read back, the object shows it did not land" in str(exc)
    assert ops(server, "get") == ["ok"]
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and not stored["spec"].get("nodeName")


def test_binding_whose_read_back_fails_too_says_the_outcome_is_unknown(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    pod = _reply_lost(server, "bind", "p1")
    server.script("bind", *["timeout"] * UNANSWERED, name="p1")
    server.script("get", "timeout", name="p1")
    exc = _binding_error(backend, pod)
    assert isinstance(exc, CallFailed) and isinstance(exc.cause, RequestTimeoutError)
    assert "the outcome is unknown: reading the object back failed" in str(exc)
    assert ops(server, "get") == ["timeout"]  # read once, never retried


class _RebindDuringLastAttempt(WrappedBackend):
    """On the last binding attempt of the first call, the scheduler binds the pod to the
    same node again, before that attempt's reply (here: its timeout) reaches the actor. The
    requests run on executor worker threads; the test thread reads ``again`` once the first
    call resolved."""

    def __init__(self, inner: ApiBackend, pod: Obj) -> None:
        super().__init__(inner)
        self.pod = pod
        self.binds = 0
        self.dispatcher: Dispatcher | None = None
        self.again: CallFuture | None = None

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        if op == "bind":
            self.binds += 1
            if self.binds == ATTEMPTS and self.dispatcher is not None:
                self.again = self.dispatcher.submit(PodBinding.for_pod(self.pod, "n1"))
        return send()


@pytest.mark.parametrize("landed", [False, True], ids=["not_landed", "landed"])
def test_a_binding_submitted_during_the_last_unanswered_attempt_waits_for_the_read_back(
    server: InMemoryApiServer, backend: ApiBackend, landed: bool
) -> None:
    """Every binding request goes unanswered (the first one lands, with ``landed``); during
    the first call's last attempt the pod is bound to the same node again. The first call is
    read back and resolves by that read (``SUCCESS`` or ``CallFailed``), never past
    ``max_attempts``; the second is not merged into it: it resolves ``SKIPPED`` once the read
    shows the pod bound, or is sent on its own budget. (It used to resolve the first call
    ``OVERWRITTEN`` unread and send the merged binding once more: 7 of 6 attempts.)"""
    pod = server.create(make_pod("p1"))
    if landed:
        server.script("bind", "apply_then_fail", *["timeout"] * (ATTEMPTS - 1), name="p1")
    else:
        server.script("bind", *["timeout"] * (2 * ATTEMPTS), name="p1")
    rebinding = _RebindDuringLastAttempt(backend, pod)
    with Dispatcher(rebinding, CONFIG) as d:
        rebinding.dispatcher = d
        first = d.submit(PodBinding.for_pod(pod, "n1"))
        first_error = first.exception(timeout=10)
        assert rebinding.again is not None
        again_error = rebinding.again.exception(timeout=10)
        again = None if again_error else rebinding.again.result(timeout=0)
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None
    if landed:
        assert first_error is None and first.result(timeout=0) is Outcome.SUCCESS
        assert again is Outcome.SKIPPED  # the read shows the pod bound to n1
        assert ops(server, "bind") == ["apply_then_fail", *["timeout"] * (ATTEMPTS - 1)]
        assert ops(server, "get") == ["ok"]
        assert stored["spec"]["nodeName"] == "n1"
        return
    for error in (first_error, again_error):  # each on its own budget, each read back
        assert isinstance(error, CallFailed) and isinstance(error.cause, RequestTimeoutError)
        assert f"gave up after {ATTEMPTS} failed requests" in str(error)
        assert "read back, the object shows it did not land" in str(error)
    assert ops(server, "bind") == ["timeout"] * (2 * ATTEMPTS)
    assert ops(server, "get") == ["ok", "ok"]
    assert not stored["spec"].get("nodeName")


def test_binding_ending_on_an_answer_is_not_read_back(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    """A 429 is an answer (the request was not applied): no read before ``CallFailed``."""
    exc = _binding_error(backend, _failing_every_bind(server, "429"))
    assert isinstance(exc, CallFailed) and "read back" not in str(exc)
    assert ops(server, "get") == []


def test_status_patch_that_landed_while_every_reply_was_lost_resolves_success(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    """The patch lands with its reply lost; every re-read before a retry times out; the one
    read before it gives up shows the condition: ``SUCCESS``, and the patch went out once."""
    pod = _reply_lost(server, "patch_status", "p1")
    server.script("get", *["timeout"] * UNANSWERED, name="p1")
    with Dispatcher(backend, CONFIG) as d:
        call = PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE])
        assert d.submit(call).result(timeout=10) is Outcome.SUCCESS
    assert ops(server, "patch_status") == ["apply_then_fail"]
    assert ops(server, "get") == [*["timeout"] * UNANSWERED, "ok"]


def test_event_created_while_every_reply_was_lost_resolves_success(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    """An Event is read back by its name (its server UID is not known to the call)."""
    pod = server.create(make_pod("p1"))
    server.script("create", "apply_then_fail", *["timeout"] * UNANSWERED)
    with Dispatcher(backend, CONFIG) as d:
        future = EventRecorder(d, controller="s").event(
            pod, reason="Scheduled", action="Binding", note="bound"
        )
        assert future is not None and future.result(timeout=10) is Outcome.SUCCESS
    assert ops(server, "create") == ["apply_then_fail", *["timeout"] * UNANSWERED]
    assert ops(server, "get") == ["ok"]
    [event] = server.list("Event").items
    assert event["reason"] == "Scheduled"


def test_deletion_that_landed_while_every_reply_was_lost_resolves_success(
    server: InMemoryApiServer, backend: ApiBackend
) -> None:
    """The deletion lands with its reply lost; every re-read before a retry times out; the
    read before it gives up finds no pod: the deletion did its job."""
    pod = _reply_lost(server, "delete", "victim")
    server.script("get", *["timeout"] * UNANSWERED, name="victim")
    with Dispatcher(backend, CONFIG) as d:
        preemption = PodPreemption.for_pod(pod, add_condition=False)
        assert d.submit(preemption).result(timeout=10) is Outcome.SUCCESS
    assert ops(server, "delete") == ["apply_then_fail"]
    assert ops(server, "get") == [*["timeout"] * UNANSWERED, "NotFound"]
