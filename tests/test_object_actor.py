"""The object actor's wiring: the shell around :class:`ObjectState` (whose rules
``tests/test_object_state.py`` covers event by event).

The test plays the executor (:class:`FakeExecutor`): it records the actor's ``ready`` calls,
sends ``Grant`` like the executor reserving a token, collects the ``job`` (or ``refund``)
answer and replies ``Done``. An actor handles its inbox in order, so a ``View`` ask after a
message returns only once that message was handled: no sleeps are needed.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from kdispatch import (
    CallCancelled,
    CallFailed,
    CallFuture,
    DependencyFailed,
    DispatcherClosed,
    Outcome,
    ServerError,
)
from kdispatch.actors import messages as msg
from kdispatch.actors.backend import ApiBackend
from kdispatch.actors.calls import Call
from kdispatch.actors.config import RetryConfig
from kdispatch.actors.metrics import Metrics
from kdispatch.actors.object_actor import ActorContext, ObjectActor
from kdispatch.actors.object_state import Done, Result
from kdispatch.actors.objects import Obj, ObjectRef
from kdispatch.actors.pod_calls import PodBinding, PodPreemption, PodStatusPatch
from kdispatch.actors.registry import Registry
from kdispatch.actors.runtime import ActorPool, PooledActor
from tests.clocks import ManualClock
from tests.factories import InertCall, cond, pod

pytestmark = pytest.mark.timeout(30)


class FakeExecutor:
    """What the actor sees of the executor. ``on_spot``: ``ready`` grants at once;
    ``inline``: ``job`` answers with this Done at once (a non-blocking backend). Called on
    pool threads."""

    def __init__(self) -> None:
        self.readies: queue.Queue[tuple[str, int, float]] = queue.Queue()
        self.answers: queue.Queue[msg.Job | None] = queue.Queue()  # None: a refund
        self.refunds = 0
        self.on_spot = False
        self.inline: Result | None = None

    def ready(self, uid: str, ref: Any, relevance: int, not_before: float) -> bool:
        self.readies.put((uid, relevance, not_before))
        return self.on_spot

    def job(self, job: msg.Job) -> Done | None:
        self.answers.put(job)
        if self.inline is not None:
            return Done(job.send.call, self.inline)
        return None

    def refund(self, uid: str | None = None) -> None:
        self.refunds += 1
        self.answers.put(None)


class Harness:
    """An object-actor world with the test as its executor."""

    def __init__(self, workers: int = 2) -> None:
        self.clock = ManualClock(100.0)
        self.pool = ActorPool(workers=workers)
        self.pool.start()
        self.registry = Registry(idle_timeout=10.0, clock=self.clock)
        self.executor = FakeExecutor()
        self.resolved = 0
        self.ctx = ActorContext(
            registry=self.registry,
            executor=self.executor,
            metrics=Metrics(),
            retry=RetryConfig(max_attempts=3, max_conflict_retries=2),
            clock=self.clock,
            on_resolved=self._count,
            spawn=self._spawn,
        )

    def _count(self, _future: CallFuture) -> None:
        self.resolved += 1

    def _spawn(self, uid: str) -> Any:
        return ObjectActor.start(uid, self.ctx, pool=self.pool)

    def submit(self, call: Call) -> CallFuture:
        fut = CallFuture()
        uid = call.ref.uid
        assert self.registry.tell(uid, msg.Submit(call, fut), lambda: self._spawn(uid))
        return fut

    def ref(self, uid: str) -> Any:
        ref = self.registry.get(uid)
        assert ref is not None, f"no actor for {uid}"
        return ref

    def take(self, uid: str) -> msg.Job | None:
        """Grant a token to the object; return its Job, or None if it refunded."""
        self.ref(uid).tell(msg.Grant(self.clock()))
        return self.executor.answers.get(timeout=5)

    def done(self, uid: str, job: msg.Job, result: Result = Result.SUCCESS, **kw: Any) -> None:
        self.ref(uid).tell(Done(job.send.call, result, **kw))

    def sync(self, uid: str) -> Obj | None:
        """Wait until the actor handled everything sent to it so far; its view."""
        view: Obj | None = self.ref(uid).ask(msg.View(), timeout=5)
        return view

    def readies(self) -> list[tuple[str, int, float]]:
        out = []
        while True:
            try:
                out.append(self.executor.readies.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        self.registry.stop_all(timeout=5)
        self.pool.stop(timeout=5)


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.close()


def unsched(p: Obj, reason: str = "Unschedulable") -> PodStatusPatch:
    return PodStatusPatch.for_pod(p, conditions=[cond(reason=reason)])


def outcome(fut: Future[Outcome]) -> Any:
    try:
        return fut.result(timeout=5)
    except Exception as exc:
        return type(exc)


# ---------------------------------------------------------------- messages reach the machine


def test_submit_grant_job_done_resolve_the_future(h: Harness) -> None:
    p = pod("a")
    call = unsched(p)
    fut = h.submit(call)
    h.sync("uid-a")
    gauge = ("scheduler_pending_async_api_calls", "pod_status_patch")
    assert h.ctx.metrics.value(gauge[0], call_type=gauge[1]) == 1
    job = h.take("uid-a")
    assert job is not None and job.send.call is call and job.send.obj is p
    assert job.ref is h.ref("uid-a")  # the worker answers this actor
    assert h.readies() == [("uid-a", 1, 0.0)]
    assert not fut.done()
    h.done("uid-a", job)
    assert fut.result(timeout=5) is Outcome.SUCCESS
    assert h.resolved == 1
    assert h.ctx.metrics.value(gauge[0], call_type=gauge[1]) == 0


def test_calls_for_different_objects_do_not_interact(h: Harness) -> None:
    fa = h.submit(unsched(pod("a")))
    fb = h.submit(PodBinding.for_pod(pod("b"), "n1"))
    ja, jb = h.take("uid-a"), h.take("uid-b")
    assert ja is not None and jb is not None
    assert ja.send.call.call_type == "pod_status_patch"
    assert jb.send.call.call_type == "pod_binding"
    h.done("uid-b", jb)
    assert fb.result(timeout=5) is Outcome.SUCCESS
    assert not fa.done()
    h.done("uid-a", ja)
    assert fa.result(timeout=5) is Outcome.SUCCESS


def test_a_grant_with_nothing_to_send_is_refunded(h: Harness) -> None:
    fut = h.submit(unsched(pod("a", conditions=(cond(),))))
    assert fut.result(timeout=5) is Outcome.SKIPPED
    assert h.take("uid-a") is None
    assert h.executor.refunds == 1


def test_grant_on_the_spot_sends_in_the_same_turn(h: Harness) -> None:
    h.executor.on_spot = True
    fut = h.submit(unsched(pod("a")))
    job = h.executor.answers.get(timeout=5)  # no Grant message was needed
    assert job is not None
    h.done("uid-a", job)
    assert fut.result(timeout=5) is Outcome.SUCCESS


def test_inline_executor_resolves_the_call_in_one_turn(h: Harness) -> None:
    h.executor.on_spot = True
    h.executor.inline = Result.SUCCESS
    fut = h.submit(unsched(pod("a")))
    assert fut.result(timeout=5) is Outcome.SUCCESS


def test_informer_cancel_and_view_messages_reach_the_machine(h: Harness) -> None:
    p = pod("a")
    f1 = h.submit(PodStatusPatch.for_pod(p, nominated_node_name="n3"))
    h.ref("uid-a").tell(msg.Observed(pod("a", rv=2, nnn="n3")))
    assert f1.result(timeout=5) is Outcome.SKIPPED
    f2 = h.submit(unsched(p))
    view = h.sync("uid-a")
    assert view is not None and view["status"]["conditions"][0]["reason"] == "Unschedulable"
    h.ref("uid-a").tell(msg.Cancel("pod_status_patch"))
    assert outcome(f2) is CallCancelled


def test_held_submit_waits_for_release_and_fails_with_its_dependency(h: Harness) -> None:
    p = pod("a")
    held, failing = CallFuture(), CallFuture()
    assert h.registry.tell(
        "uid-a", msg.Submit(unsched(p), held, frozenset({"t1"})), lambda: h._spawn("uid-a")
    )
    assert h.registry.tell(
        "uid-b",
        msg.Submit(PodBinding.for_pod(pod("b"), "n1"), failing, frozenset({"t2"})),
        lambda: h._spawn("uid-b"),
    )
    h.sync("uid-a")
    h.sync("uid-b")
    assert h.readies() == []  # held calls ask the executor for nothing
    cause = ServerError("reservation failed")
    h.ref("uid-b").tell(msg.FailDependency("t2", cause))
    err = outcome(failing)
    assert err is DependencyFailed
    assert failing.exception() is not None and failing.exception().cause is cause  # type: ignore[union-attr]
    h.ref("uid-a").tell(msg.Release("t1"))
    h.sync("uid-a")
    assert h.readies() == [("uid-a", 1, 0.0)]
    job = h.take("uid-a")
    assert job is not None
    h.done("uid-a", job)
    assert held.result(timeout=5) is Outcome.SUCCESS


def test_retry_delay_reaches_the_executor_as_not_before(h: Harness) -> None:
    fut = h.submit(PodBinding.for_pod(pod("a"), "n1"))
    job = h.take("uid-a")
    assert job is not None
    h.readies()
    h.done("uid-a", job, Result.RETRY, error=ServerError(), delay=2.0)
    h.sync("uid-a")
    assert h.readies() == [("uid-a", 2, 102.0)]
    assert not fut.done()


# ---------------------------------------------------------------- retiring


def test_deletion_cancels_pending_tombstones_and_stops(h: Harness) -> None:
    p = pod("a")
    fut = h.submit(PodBinding.for_pod(p, "n1"))
    ref = h.ref("uid-a")
    ref.tell(msg.Deleted(p))
    assert outcome(fut) is CallCancelled
    assert ref.actor_stopped.wait(5)
    assert h.registry.is_tombstoned("uid-a")
    # a late event cannot resurrect it
    assert not h.registry.tell("uid-a", msg.Observed(pod("a", rv=9)))
    assert h.registry.get("uid-a") is None


def test_deletion_with_call_in_flight_stops_once_it_is_done(h: Harness) -> None:
    p = pod("a")
    f1 = h.submit(unsched(p))
    job = h.take("uid-a")
    assert job is not None
    ref = h.ref("uid-a")
    ref.tell(msg.Deleted(p))
    h.sync("uid-a")
    assert not ref.actor_stopped.is_set() and not f1.done()
    ref.tell(Done(job.send.call, Result.NOT_FOUND))
    assert ref.actor_stopped.wait(5)
    assert f1.done()


def test_preemption_success_retires_the_actor(h: Harness) -> None:
    p = pod("a")
    fut = h.submit(PodPreemption.for_pod(p))
    job = h.take("uid-a")
    assert job is not None
    ref = h.ref("uid-a")
    h.done("uid-a", job)
    assert fut.result(timeout=5) is Outcome.SUCCESS
    assert ref.actor_stopped.wait(5)
    assert h.registry.is_tombstoned("uid-a")


def test_close_resolves_pending_and_in_flight(h: Harness) -> None:
    f1 = h.submit(unsched(pod("a")))
    f2 = h.submit(unsched(pod("b")))
    assert h.take("uid-a") is not None
    for uid in ("uid-a", "uid-b"):
        h.ref(uid).ask(msg.Close(), timeout=5)
    assert outcome(f1) is DispatcherClosed
    assert outcome(f2) is DispatcherClosed
    assert h.resolved == 2


def test_submit_while_closing_resolves_dispatcher_closed(h: Harness) -> None:
    h.submit(unsched(pod("a")))
    h.ctx.closing = True
    assert outcome(h.submit(unsched(pod("a")))) is DispatcherClosed


# ---------------------------------------------------------------- crash isolation


@dataclass(frozen=True, slots=True)
class BuggyPatch(InertCall):
    """A user call type whose merger raises, and whose precheck raises once ``armed``; its
    send answers the object it was given."""

    call_type: ClassVar[str] = "buggy_patch"
    relevance: ClassVar[int] = 5

    value: int = 0
    armed: list[bool] = field(default_factory=lambda: [False], compare=False)

    def merge(self, older: BuggyPatch) -> BuggyPatch:
        raise RuntimeError("merger bug")

    def precheck(self, obj: Obj | None) -> str | None:
        if self.armed[0]:
            raise RuntimeError("precheck bug")
        return None

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        return obj


class Blocker(PooledActor):
    """Holds a pool worker until ``gate`` is set, so messages pile up in other inboxes."""

    def __init__(self, gate: threading.Event, *, pool: ActorPool) -> None:
        super().__init__(pool=pool)
        self.gate = gate

    def on_receive(self, message: Any) -> Any:
        assert self.gate.wait(10)
        return None


def test_crash_fails_that_objects_futures_and_queued_messages_reach_a_clean_actor() -> None:
    h = Harness(workers=1)
    gate = threading.Event()
    blocker = Blocker.start(gate, pool=h.pool)
    try:
        a, b = pod("a"), pod("b")
        fb = h.submit(unsched(b))
        blocker.tell("hold")  # the only pool worker is busy from here on
        f1 = h.submit(BuggyPatch(ObjectRef.of(a), 1, basis=a))
        old_ref = h.ref("uid-a")
        f2 = h.submit(BuggyPatch(ObjectRef.of(a), 2, basis=a))  # merge raises in the actor
        f3 = h.submit(unsched(a))  # queued behind the crash: routed by on_dropped
        old_ref.tell(msg.Grant(h.clock()))  # queued behind the crash: refunded by on_dropped
        gate.set()
        assert outcome(f1) is CallFailed
        assert outcome(f2) is CallFailed
        assert old_ref.actor_stopped.wait(5)
        assert h.executor.answers.get(timeout=5) is None  # the late Grant was refunded
        # the object got a fresh actor, which holds f3; the other object is untouched
        new_ref = h.ref("uid-a")
        assert new_ref is not old_ref
        job = h.take("uid-a")
        assert job is not None and job.send.call.call_type == "pod_status_patch"
        h.done("uid-a", job)
        assert f3.result(timeout=5) is Outcome.SUCCESS
        assert not fb.done()
        jb = h.take("uid-b")
        assert jb is not None
        h.done("uid-b", jb)
        assert fb.result(timeout=5) is Outcome.SUCCESS
        assert h.ctx.metrics.value("kdispatch_object_actor_failures_total") == 1
    finally:
        gate.set()
        blocker.stop()
        h.close()


def test_crash_while_holding_a_grant_refunds_it(h: Harness) -> None:
    a = pod("a")
    call = BuggyPatch(ObjectRef.of(a), 1, basis=a)
    fut = h.submit(call)
    h.sync("uid-a")
    call.armed[0] = True  # the precheck at grant raises
    old_ref = h.ref("uid-a")
    old_ref.tell(msg.Grant(h.clock()))
    assert outcome(fut) is CallFailed
    assert h.executor.answers.get(timeout=5) is None  # the slot and token went back
    assert h.executor.refunds == 1
    assert old_ref.actor_stopped.wait(5)
    assert h.registry.get("uid-a") is None  # forgotten, not tombstoned
    assert not h.registry.is_tombstoned("uid-a")


# ---------------------------------------------------------------- reaping


def test_idle_actor_is_reaped_busy_one_is_not(h: Harness) -> None:
    fa = h.submit(unsched(pod("a")))
    ja = h.take("uid-a")
    assert ja is not None
    h.done("uid-a", ja)
    assert fa.result(timeout=5) is Outcome.SUCCESS
    h.submit(unsched(pod("b")))  # stays pending
    ref_a, ref_b = h.ref("uid-a"), h.ref("uid-b")
    h.clock.now += 11
    assert h.registry.reap_idle() == 2
    assert ref_a.actor_stopped.wait(5)
    h.sync("uid-b")
    assert h.registry.get("uid-a") is None
    assert h.registry.get("uid-b") is ref_b
    # a new call for the reaped object gets a new actor
    fut = h.submit(unsched(pod("a", rv=2), reason="Again"))
    assert h.ref("uid-a") is not ref_a
    job = h.take("uid-a")
    assert job is not None
    h.done("uid-a", job)
    assert fut.result(timeout=5) is Outcome.SUCCESS
