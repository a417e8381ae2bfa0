"""The Dispatcher end to end on the embedded in-memory apiserver."""

from __future__ import annotations

import dataclasses
import math
import threading
from concurrent.futures import wait
from typing import Any, ClassVar

import pytest
from prometheus_client import CollectorRegistry

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.call_types import default_call_types
from kdispatch.actors.model.claim_calls import ClaimStatusPatch
from kdispatch.actors.model.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RetryConfig,
)
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallConflict,
    CallFailed,
    DispatcherClosed,
    InvalidCallError,
    InvalidInputError,
    InvalidObjectError,
    ObjectNotFound,
    Outcome,
    UnknownCallTypeError,
)
from kdispatch.actors.model.objects import Obj, ObjectRef
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.testing.memory import InMemoryApiServer, make_claim, make_pod
from tests.backends import GatedBackend
from tests.configs import FAST
from tests.factories import InertCall, cond

pytestmark = pytest.mark.timeout(60)


def result(fut: Any) -> Any:
    try:
        return fut.result(timeout=10)
    except Exception as exc:
        return type(exc)


def test_binding_reaches_the_server(server: InMemoryApiServer, dispatcher: Dispatcher) -> None:
    pod = server.create(make_pod("p1"))
    assert (
        dispatcher.submit(PodBinding.for_pod(pod, "node-1")).result(timeout=10) is Outcome.SUCCESS
    )
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["spec"]["nodeName"] == "node-1"
    assert dispatcher.stats()["sent"] == {"pod_binding": 1}


def test_status_patch_reaches_the_server_with_preconditions(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod = server.create(make_pod("p1"))
    fut = dispatcher.submit(
        PodStatusPatch.for_pod(
            pod, conditions=[cond(message="0/3 nodes")], nominated_node_name="n2"
        )
    )
    assert fut.result(timeout=10) is Outcome.SUCCESS
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None
    assert stored["status"]["nominatedNodeName"] == "n2"
    [c] = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (c["status"], c["message"]) == ("False", "0/3 nodes")


def test_merging_sends_fewer_requests(server: InMemoryApiServer) -> None:
    gated = GatedBackend(server, hold="p1")  # p1's requests wait for the gate
    pod = server.create(make_pod("p1"))
    with Dispatcher(gated, FAST) as d:
        first = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message="try 0")]))
        gated.wait_calls(1)  # in flight, held at the gate
        futs = [
            d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message=f"try {i}")]))
            for i in range(1, 20)
        ]
        gated.gate.set()
        assert first.result(timeout=10) is Outcome.SUCCESS
        outcomes = [f.result(timeout=10) for f in futs]
    assert outcomes.count(Outcome.OVERWRITTEN) == 18
    assert outcomes[-1] is Outcome.SUCCESS
    assert [c[0] for c in gated.calls].count("patch_status") == 2
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None
    assert stored["status"]["conditions"][0]["message"] == "try 19"


def test_retryable_errors_are_retried(server: InMemoryApiServer, dispatcher: Dispatcher) -> None:
    pod = server.create(make_pod("p1"))
    server.script("bind", "500", "429", "timeout", name="p1")
    assert dispatcher.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10) is Outcome.SUCCESS
    retries = dispatcher.stats()["retries"]
    assert retries == {"pod_binding:5xx": 1, "pod_binding:429": 1, "pod_binding:timeout": 1}


def test_retries_are_bounded(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("p1"))
    server.script("bind", *["500"] * 3, name="p1")
    cfg = DispatcherConfig(
        rate_limit=FAST.rate_limit, retry=RetryConfig(max_attempts=3, base_backoff=0, max_backoff=0)
    )
    with Dispatcher(server, cfg) as d:
        exc = d.submit(PodBinding.for_pod(pod, "n1")).exception(timeout=10)
    assert isinstance(exc, CallFailed)


def test_permanent_error_fails_without_retry(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod = server.create(make_pod("p1"))
    server.script("patch_status", "409", "409", "409", "409", name="p1")
    fut = dispatcher.submit(PodStatusPatch.for_pod(pod, conditions=[cond()]))
    assert result(fut) is CallConflict  # 1 try + 3 bounded rebases


def test_binding_reply_lost_is_recognised_as_done(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """Two generals: the first binding landed but its reply was lost."""
    pod = server.create(make_pod("p1"))
    server.script("bind", "apply_then_fail", name="p1")
    assert dispatcher.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10) is Outcome.SUCCESS
    outcomes = [r.outcome for r in server.request_log if r.op == "bind"]
    # the first try landed and its reply was lost; the retry met "already bound" (409)
    assert len(outcomes) == 2 and outcomes[0] != "ok" and outcomes[1] != "ok"
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["spec"]["nodeName"] == "n1"


def test_binding_conflicting_with_other_node_fails(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("p1"))
    server.bind("default", "p1", uid=pod["metadata"]["uid"], node="other")
    with Dispatcher(server, FAST) as d:
        assert result(d.submit(PodBinding.for_pod(pod, "n1"))) is CallConflict
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["spec"]["nodeName"] == "other"


def test_preemption_deletes_the_victim(server: InMemoryApiServer, dispatcher: Dispatcher) -> None:
    pod = server.create(make_pod("victim"))
    fut = dispatcher.preempt(pod, preemptor="default/high", message="preempted by high")
    assert fut.result(timeout=10) is Outcome.SUCCESS
    assert server.get_object("Pod", "default", "victim") is None
    # the actor is retired and tombstoned: a late call is cancelled, not sent
    assert result(dispatcher.submit(PodBinding.for_pod(pod, "n1"))) is CallCancelled


def test_delete_event_cancels_pending_calls(server: InMemoryApiServer) -> None:
    gated = GatedBackend(server)
    a, b = server.create(make_pod("a")), server.create(make_pod("b"))
    with Dispatcher(gated, FAST) as d:
        gated.gate.clear()
        fa = d.submit(PodStatusPatch.for_pod(a, conditions=[cond()]))
        gated.wait_calls(1)
        fa2 = d.submit(PodStatusPatch.for_pod(a, conditions=[cond(message="later")]))
        fb = d.submit(PodBinding.for_pod(b, "n1"))
        d.on_delete(a)
        assert result(fa2) is CallCancelled
        gated.gate.set()
        assert result(fb) is Outcome.SUCCESS
        assert result(fa) is Outcome.SUCCESS  # was in flight: cannot be recalled
        assert result(d.submit(PodBinding.for_pod(a, "n1"))) is CallCancelled


def test_update_for_untracked_object_changes_nothing(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod = server.create(make_pod("p1"))
    dispatcher.on_update(pod)
    dispatcher.on_add(pod)
    assert dispatcher.live_actors == 0
    assert dispatcher.view(pod["metadata"]["uid"]) is None


def test_view_is_read_your_writes(server: InMemoryApiServer) -> None:
    gated = GatedBackend(server, hold="p1")  # p1's requests wait for the gate
    pod = server.create(make_pod("p1"))
    with Dispatcher(gated, FAST) as d:
        d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n7"))
        view = d.view(pod["metadata"]["uid"])
        assert view is not None and view["status"]["nominatedNodeName"] == "n7"
        gated.gate.set()


def test_claim_reservation(server: InMemoryApiServer, dispatcher: Dispatcher) -> None:
    claim = server.create(make_claim("c1"))
    consumer = {"resource": "pods", "name": "p1", "uid": "pod-uid-1"}
    fut = dispatcher.submit(
        ClaimStatusPatch.for_claim(claim, allocate={"devices": {"results": []}}, reserve=[consumer])
    )
    assert fut.result(timeout=10) is Outcome.SUCCESS
    stored = server.get_object("ResourceClaim", "default", "c1")
    assert stored is not None
    assert stored["status"]["reservedFor"] == [consumer]


def test_many_pods_concurrently(server: InMemoryApiServer) -> None:
    pods = [server.create(make_pod(f"p{i}")) for i in range(5000)]
    with Dispatcher(server, FAST) as d:
        futs = [d.submit(PodBinding.for_pod(p, f"n{i % 50}")) for i, p in enumerate(pods)]
        _done, not_done = wait(futs, timeout=50)
        assert not not_done
        assert {f.result() for f in futs} == {Outcome.SUCCESS}
    items = server.list("Pod").items
    assert all(p["spec"].get("nodeName") for p in items)
    assert server.counts()["bind"] == 5000


def test_stop_drains_then_rejects(server: InMemoryApiServer) -> None:
    pod = server.create(make_pod("p1"))
    d = Dispatcher(server, FAST).start()
    fut = d.submit(PodBinding.for_pod(pod, "n1"))
    assert d.stop(drain=True, timeout=10) is True
    assert fut.result(timeout=0) is Outcome.SUCCESS
    with pytest.raises(DispatcherClosed):
        d.submit(PodBinding.for_pod(pod, "n1"))
    assert d.live_actors == 0


def test_stop_without_drain_resolves_everything_closed(server: InMemoryApiServer) -> None:
    gated = GatedBackend(server)
    pods = [server.create(make_pod(f"p{i}")) for i in range(50)]
    d = Dispatcher(gated, DispatcherConfig(executor=ExecutorConfig(workers=2))).start()
    gated.gate.clear()
    futs = [d.submit(PodBinding.for_pod(p, "n1")) for p in pods]
    gated.wait_calls(2)
    stopper_result: list[bool] = []

    t = threading.Thread(target=lambda: stopper_result.append(d.stop(drain=False, timeout=5)))
    t.start()
    # every future is resolved by the deadline; the two held requests are released after
    _done, not_done = wait(futs, timeout=10)
    gated.gate.set()
    t.join(timeout=30)
    assert not not_done
    outcomes = [result(f) for f in futs]
    assert outcomes.count(DispatcherClosed) >= 48
    assert stopper_result == [False]


def test_metrics_use_upstream_names_and_injected_registry(server: InMemoryApiServer) -> None:
    registry = CollectorRegistry()
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, FAST, metrics_registry=registry) as d:
        d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10)
    names = {m.name for m in registry.collect()}
    assert {
        "scheduler_pending_async_api_calls",
        "scheduler_async_api_call_execution",
        "scheduler_async_api_call_execution_duration_seconds",
    } <= names
    assert (
        registry.get_sample_value(
            "scheduler_async_api_call_execution_total",
            {"call_type": "pod_binding", "result": "success", "outcome": "success"},
        )
        == 1
    )


# ---------------------------------------------------------------- bad input at the boundary


def test_bad_input_is_rejected(server: InMemoryApiServer, dispatcher: Dispatcher) -> None:
    with pytest.raises(InvalidCallError):
        dispatcher.submit("bind p1")  # type: ignore[arg-type]
    with pytest.raises(InvalidObjectError):
        dispatcher.on_update({"kind": "Pod"})
    with pytest.raises(InvalidObjectError):
        dispatcher.cancel("")
    with pytest.raises(UnknownCallTypeError):
        dispatcher.cancel("uid-1", "pod_teleport")
    with pytest.raises(InvalidInputError):
        Dispatcher(object())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        Dispatcher(server, {"qps": 5})  # type: ignore[arg-type]


def test_logs_are_off_by_default_and_carry_bound_fields(server: InMemoryApiServer) -> None:
    from loguru import logger

    records: list[Any] = []
    sink = logger.add(lambda m: records.append(m.record), level="DEBUG")
    try:
        pod = server.create(make_pod("p1"))
        with Dispatcher(server, FAST) as d:
            d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10)
        assert records == []  # the library is silent unless enabled
        logger.enable("kdispatch")
        pod2 = server.create(make_pod("p2"))
        with Dispatcher(server, dataclasses.replace(FAST, log_calls=True)) as d:
            d.submit(PodBinding.for_pod(pod2, "n1")).result(timeout=10)
    finally:
        logger.disable("kdispatch")
        logger.remove(sink)
    extras = [r["extra"] for r in records]
    assert {
        "uid": pod2["metadata"]["uid"],
        "call_type": "pod_binding",
        "result": "success",
    }.items() <= (next(e for e in extras if "attempt" not in e and e.get("uid")).items())
    assert any(e.get("attempt") == 1 and e.get("pod") == "p2" for e in extras)


def test_max_live_actors_is_enforced_with_a_typed_error(server: InMemoryApiServer) -> None:
    from kdispatch.actors.model.config import RegistryConfig
    from kdispatch.actors.model.errors import ActorLimitExceeded

    gated = GatedBackend(server)
    pods = [server.create(make_pod(f"p{i}")) for i in range(3)]
    cfg = DispatcherConfig(rate_limit=FAST.rate_limit, registry=RegistryConfig(max_live=2))
    with Dispatcher(gated, cfg) as d:
        gated.gate.clear()
        futs = [d.submit(PodBinding.for_pod(p, "n1")) for p in pods[:2]]
        with pytest.raises(ActorLimitExceeded):
            d.submit(PodBinding.for_pod(pods[2], "n1"))
        assert d.outstanding == 2  # the rejected call is not counted as pending
        gated.gate.set()
        assert [f.result(timeout=10) for f in futs] == [Outcome.SUCCESS] * 2


def test_cancel_withdraws_a_queued_call(server: InMemoryApiServer) -> None:
    gated = GatedBackend(server, hold="p1")  # p1's requests wait for the gate
    pod = server.create(make_pod("p1"))
    with Dispatcher(gated, FAST) as d:
        first = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message="a")]))
        gated.wait_calls(1)
        queued = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message="b")]))
        d.cancel(pod["metadata"]["uid"])
        assert result(queued) is CallCancelled
        gated.gate.set()
        assert first.result(timeout=10) is Outcome.SUCCESS
    assert [c[0] for c in gated.calls] == ["patch_status"]


def test_future_cancel_never_breaks_exactly_once(server: InMemoryApiServer) -> None:
    gated = GatedBackend(server, hold="p1")  # p1's requests wait for the gate
    pod = server.create(make_pod("p1"))
    with Dispatcher(gated, FAST) as d:
        fut = d.submit(PodBinding.for_pod(pod, "n1"))
        assert fut.cancel() is False  # the dispatcher owns the call; use cancel(uid)
        gated.gate.set()
        assert fut.result(timeout=10) is Outcome.SUCCESS


def test_done_callbacks_run_on_the_pool_or_the_worker_never_the_submitter(
    server: InMemoryApiServer,
) -> None:
    """A future a turn resolves runs its callbacks on a ``kdispatch-pool`` thread, or on the
    ``kdispatch-executor`` worker that ran the turn taking its request's result; never on the
    submitting thread. A call that never reaches an actor (its object deleted) is resolved
    before ``submit`` returns."""
    gated = GatedBackend(server, hold="p1")
    pod = server.create(make_pod("p1"))
    gone = server.create(make_pod("gone"))
    ran_on: dict[str, str] = {}

    def record(name: str) -> Any:
        return lambda _f: ran_on.__setitem__(name, threading.current_thread().name)

    with Dispatcher(gated, FAST) as d:
        first = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message="a")]))
        gated.wait_calls(1)  # on the wire, held by the gate
        queued = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond(message="b")]))
        first.add_done_callback(record("first"))
        queued.add_done_callback(record("queued"))
        d.cancel(pod["metadata"]["uid"])  # a message to the actor: resolved on its turn
        assert result(queued) is CallCancelled
        gated.gate.set()
        assert first.result(timeout=10) is Outcome.SUCCESS
        d.on_delete(gone)
        refused = d.submit(PodBinding.for_pod(gone, "n1"))
        assert refused.done() and result(refused) is CallCancelled
    assert ran_on["queued"].startswith("kdispatch-pool-"), ran_on
    assert ran_on["first"].startswith(("kdispatch-pool-", "kdispatch-executor-")), ran_on
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None
    assert [c.get("message") for c in stored["status"]["conditions"]] == ["a"]


STATS_KEYS = {
    "sent",
    "sent_total",
    "outcomes",
    "retries",
    "live_actors",
    "events_without_actor",
    "tokens_taken",
    "events",
    "pid",
}


def test_stats_keys_are_documented_and_count_events_without_actor(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    untracked = server.create(make_pod("untracked"))
    dispatcher.on_update(untracked)  # no call for it: no actor, counted
    stats = dispatcher.stats()
    assert set(stats) == STATS_KEYS
    assert stats["events_without_actor"] == 1
    doc = Dispatcher.stats.__doc__ or ""
    for key in STATS_KEYS:
        assert f"``{key}``" in doc


@pytest.mark.parametrize("started", [True, False])
def test_start_after_stop_says_to_create_a_new_dispatcher(
    server: InMemoryApiServer, started: bool
) -> None:
    d = Dispatcher(server, FAST)
    if started:
        d.start()
    d.stop(timeout=5)
    with pytest.raises(InvalidInputError, match="stopped: create a new Dispatcher"):
        d.start()


def test_a_call_for_a_deleted_object_names_it(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    pod = server.create(make_pod("gone"))
    uid = pod["metadata"]["uid"]
    dispatcher.on_delete(pod)  # untracked: tombstoned at once
    with pytest.raises(CallCancelled) as caught:
        dispatcher.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10)
    assert str(caught.value) == f"Pod default/gone ({uid}): object deleted"
    assert caught.value.ref is not None and caught.value.ref.uid == caught.value.uid == uid


def test_a_deletion_of_an_object_already_deleted_succeeds_unsent(
    server: InMemoryApiServer, dispatcher: Dispatcher
) -> None:
    """The object's deletion was seen before its preemption was submitted: the preemption got
    its way (``SUCCESS``, as after a 404) and sends nothing; another call is cancelled."""
    pod = server.create(make_pod("gone"))
    dispatcher.on_delete(pod)
    assert dispatcher.preempt(pod).result(timeout=10) is Outcome.SUCCESS
    with pytest.raises(CallCancelled):
        dispatcher.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10)
    assert server.request_log == []


def test_an_outcome_error_names_its_object_once_and_survives_pickling() -> None:
    import pickle

    ref = ObjectRef("Pod", "ns", "p", "u-1")
    err = CallFailed("boom", ref=ref, call_type="pod_binding", cause=ValueError("x"))
    assert str(err) == "Pod ns/p (u-1): boom"
    again = pickle.loads(pickle.dumps(err))
    assert (str(again), again.uid, again.ref) == (str(err), "u-1", ref)
    assert str(CallFailed(f"{ref} already named", ref=ref)) == f"{ref} already named"
    assert str(CallCancelled("no object known")) == "no object known"


HELD = threading.Event()  # a blocking custom send waits on it
ENTERED = threading.Event()


@dataclasses.dataclass(frozen=True, slots=True)
class HeldNote(InertCall):
    """A custom call whose ``send`` blocks outside the backend (waits on ``HELD``)."""

    call_type: ClassVar[str] = "held_note"
    relevance: ClassVar[int] = 1

    note: str

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        ENTERED.set()
        assert HELD.wait(30)
        return backend.patch_status(
            "Pod", self.ref.namespace, self.ref.name, {"status": {"message": self.note}},
            uid=self.ref.uid, resource_version=None,
        )  # fmt: skip


def test_a_blocking_custom_send_does_not_stall_another_objects_call(
    server: InMemoryApiServer,
) -> None:
    """The in-memory backend is non-blocking and there is no QPS limit, the case where sends
    may run on the actor's own thread: ``inline_sends=False`` keeps them on the workers."""
    HELD.clear()
    ENTERED.clear()
    types = default_call_types()
    types.register(HeldNote)
    slow, other = server.create(make_pod("slow")), server.create(make_pod("other"))
    config = dataclasses.replace(FAST, executor=ExecutorConfig(inline_sends=False))
    d = Dispatcher(server, config, call_types=types).start()
    try:
        held = d.submit(HeldNote(ObjectRef.of(slow, "Pod"), "hi", basis=slow))
        assert ENTERED.wait(10)  # the custom send is blocked now
        assert d.submit(PodBinding.for_pod(other, "n1")).result(timeout=10) is Outcome.SUCCESS
        assert not held.done()
        HELD.set()
        assert held.result(timeout=10) is Outcome.SUCCESS
    finally:
        HELD.set()
        d.stop(timeout=10)
    stored = server.get_object("Pod", "default", "other")
    assert stored is not None and stored["spec"]["nodeName"] == "n1"


def test_binding_for_a_pod_that_does_not_exist_names_the_pod() -> None:
    server = InMemoryApiServer()
    ghost = make_pod("ghost", uid="uid-ghost")  # never created on the server
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=math.inf, burst=1),
        retry=RetryConfig(base_backoff=0.0, max_backoff=0.0, budget=5.0),
    )
    with Dispatcher(server, config) as dispatcher:
        future = dispatcher.submit(PodBinding.for_pod(ghost, "n1"))
        with pytest.raises(ObjectNotFound) as info:
            future.result(10)
    message = str(info.value)
    assert "Pod default/ghost" in message and "uid-ghost" in message, message
    assert [(r.op, r.outcome) for r in server.request_log] == [("bind", "NotFound")]
