"""Per-object rules (DESIGN §3), driven message by message.

The test plays the executor: it receives the actor's ``Ready`` notifications, sends ``Grant`` like
the executor reserving a token, collects the ``Job`` (or ``Refund``) answer and replies ``Done``.
An actor handles its inbox in order, so a ``View`` ask after a message returns only once that
message was handled: no sleeps are needed.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from kdispatch.actors.backend import ApiBackend
from kdispatch.actors.call_types import default_call_types
from kdispatch.actors.calls import Call
from kdispatch.actors.config import RetryConfig
from kdispatch.actors.errors import (
    CallCancelled,
    CallConflict,
    CallFailed,
    ConflictError,
    DispatcherClosed,
    ObjectNotFound,
    Outcome,
    ServerError,
)
from kdispatch.actors.messages import (
    CallFuture,
    Cancel,
    Close,
    Deleted,
    Done,
    Grant,
    Job,
    Observed,
    Ready,
    Refund,
    Result,
    Submit,
    View,
)
from kdispatch.actors.metrics import Metrics
from kdispatch.actors.object_actor import ActorContext, ObjectActor
from kdispatch.actors.objects import Obj, ObjectRef
from kdispatch.actors.pod_calls import PodBinding, PodPreemption, PodStatusPatch
from kdispatch.actors.registry import Registry
from kdispatch.actors.runtime import ActorPool
from tests.factories import cond, pod

pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Harness:
    """An object-actor world without an executor: the test is the executor."""

    def __init__(self, retry: RetryConfig | None = None) -> None:
        self.clock = Clock()
        self.pool = ActorPool(workers=2)
        self.pool.start()
        self.registry = Registry(idle_timeout=10.0, clock=self.clock)
        self.ready: queue.Queue[Ready] = queue.Queue()
        self.answers: queue.Queue[Job | Refund] = queue.Queue()
        self.resolved = 0
        self.ctx = ActorContext(
            registry=self.registry,
            executor=self._executor,
            metrics=Metrics(),
            retry=retry or RetryConfig(max_attempts=3, max_conflict_retries=2),
            clock=self.clock,
            on_resolved=self._count,
            spawn=self._spawn,
        )

    def _executor(self, msg: Ready | Job | Refund) -> None:
        if isinstance(msg, Ready):
            self.ready.put(msg)
        else:
            self.answers.put(msg)

    def _count(self) -> None:
        self.resolved += 1

    def _spawn(self, uid: str) -> Any:
        return ObjectActor.start(uid, self.ctx, pool=self.pool)

    def submit(self, call: Call) -> Future[Outcome]:
        fut = CallFuture()
        uid = call.ref.uid
        assert self.registry.tell(uid, Submit(call, fut), lambda: self._spawn(uid))
        return fut

    def ref(self, uid: str) -> Any:
        ref = self.registry.get(uid)
        assert ref is not None, f"no actor for {uid}"
        return ref

    def take(self, uid: str) -> Job | None:
        """Grant a token to the object; return its Job, or None if it refunded."""
        self.ref(uid).tell(Grant(self.clock()))
        answer = self.answers.get(timeout=5)
        return answer if isinstance(answer, Job) else None

    def done(self, uid: str, taken: Job, result: Result = Result.SUCCESS, **kw: Any) -> None:
        self.ref(uid).tell(Done(taken.call, result, **kw))

    def view(self, uid: str) -> Obj | None:
        result: Obj | None = self.ref(uid).ask(View(), timeout=5)
        return result

    def sync(self, uid: str) -> None:
        """Wait until the actor handled everything sent to it so far."""
        ref = self.registry.get(uid)
        if ref is not None:
            ref.ask(View(), timeout=5)

    def readies(self) -> list[Ready]:
        out = []
        while True:
            try:
                out.append(self.ready.get_nowait())
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


def unsched(p: Obj, reason: str = "Unschedulable", message: str = "") -> PodStatusPatch:
    return PodStatusPatch.for_pod(p, conditions=[cond(reason=reason, message=message)])


def outcome(fut: Future[Outcome]) -> Any:
    try:
        return fut.result(timeout=5)
    except Exception as exc:
        return type(exc)


# ---------------------------------------------------------------- upstream queue behaviour


def test_first_call_is_queued(h: Harness) -> None:
    p = pod("a")
    fut = h.submit(unsched(p))
    taken = h.take(p["metadata"]["uid"])
    assert taken is not None and taken.call.call_type == "pod_status_patch"
    assert taken.attempt == 1
    assert [r.relevance for r in h.readies()] == [1]
    assert not fut.done()
    h.done("uid-a", taken)
    assert fut.result(timeout=5) is Outcome.SUCCESS


def test_noop_call_is_skipped(h: Harness) -> None:
    p = pod("a", conditions=(cond(),))
    fut = h.submit(unsched(p))
    assert fut.result(timeout=5) is Outcome.SKIPPED
    assert h.take("uid-a") is None
    assert h.readies() == []


def test_calls_for_different_objects_do_not_interact(h: Harness) -> None:
    fa = h.submit(unsched(pod("a")))
    fb = h.submit(PodBinding.for_pod(pod("b"), "n1"))
    ta, tb = h.take("uid-a"), h.take("uid-b")
    assert ta is not None and tb is not None
    assert ta.call.call_type == "pod_status_patch" and tb.call.call_type == "pod_binding"
    h.done("uid-b", tb)
    assert fb.result(timeout=5) is Outcome.SUCCESS
    assert not fa.done()
    h.done("uid-a", ta)
    assert fa.result(timeout=5) is Outcome.SUCCESS


def test_more_relevant_call_overwrites_pending_and_keeps_its_slot(h: Harness) -> None:
    p = pod("a")
    f_patch = h.submit(unsched(p))
    f_bind = h.submit(PodBinding.for_pod(p, "n1"))
    assert f_patch.result(timeout=5) is Outcome.OVERWRITTEN
    # The old slot (lane 1) serves the binding at once: it never waits longer than the patch.
    taken = h.take("uid-a")
    assert taken is not None and taken.call.call_type == "pod_binding"
    h.done("uid-a", taken)
    assert f_bind.result(timeout=5) is Outcome.SUCCESS
    assert [r.relevance for r in h.readies()] == [1, 2]


def test_less_relevant_call_after_more_relevant_is_skipped(h: Harness) -> None:
    p = pod("a")
    f_bind = h.submit(PodBinding.for_pod(p, "n1"))
    f_patch = h.submit(unsched(p))
    assert f_patch.result(timeout=5) is Outcome.SKIPPED
    assert not f_bind.done()
    # ... also while the binding is in flight
    taken = h.take("uid-a")
    assert taken is not None
    assert h.submit(unsched(p)).result(timeout=5) is Outcome.SKIPPED
    h.done("uid-a", taken)
    assert f_bind.result(timeout=5) is Outcome.SUCCESS


def test_same_type_merges_and_older_is_overwritten(h: Harness) -> None:
    p = pod("a")
    f1 = h.submit(PodStatusPatch.for_pod(p, conditions=[cond(reason="A")]))
    f2 = h.submit(PodStatusPatch.for_pod(p, nominated_node_name="n2"))
    assert f1.result(timeout=5) is Outcome.OVERWRITTEN
    taken = h.take("uid-a")
    assert isinstance(taken, Job) and isinstance(taken.call, PodStatusPatch)
    assert taken.call.nominated_node_name == "n2"
    assert [c["reason"] for c in taken.call.conditions] == ["A"]
    h.done("uid-a", taken)
    assert f2.result(timeout=5) is Outcome.SUCCESS


def test_merge_that_becomes_noop_skips_new_and_removes_pending(h: Harness) -> None:
    p = pod("a", conditions=(cond(reason="A"),))
    f1 = h.submit(unsched(p, reason="B"))
    f2 = h.submit(unsched(p, reason="A"))
    assert f1.result(timeout=5) is Outcome.OVERWRITTEN
    assert f2.result(timeout=5) is Outcome.SKIPPED
    assert h.take("uid-a") is None


def test_call_arriving_while_one_is_in_flight_waits_and_runs_after(h: Harness) -> None:
    p = pod("a")
    f1 = h.submit(unsched(p, reason="A"))
    t1 = h.take("uid-a")
    assert t1 is not None
    f2 = h.submit(unsched(p, reason="B"))
    h.readies()
    assert h.take("uid-a") is None  # one call per object at a time
    assert not f1.done() and not f2.done()
    h.done("uid-a", t1, obj=pod("a", rv=2, conditions=(cond(reason="A"),)))
    assert f1.result(timeout=5) is Outcome.SUCCESS  # never reported overwritten (#135180)
    t2 = h.take("uid-a")
    assert t2 is not None and [c["reason"] for c in t2.call.conditions] == ["B"]  # type: ignore[attr-defined]
    assert [r.relevance for r in h.readies()] == [1]
    h.done("uid-a", t2)
    assert f2.result(timeout=5) is Outcome.SUCCESS


def test_informer_update_rebases_and_cancels_pending_noop(h: Harness) -> None:
    p = pod("a")
    fut = h.submit(unsched(p, reason="A"))
    h.ref("uid-a").tell(Observed(pod("a", rv=5, conditions=(cond(reason="A"),))))
    assert fut.result(timeout=5) is Outcome.SKIPPED
    assert h.take("uid-a") is None


def test_informer_update_rebases_pending_that_still_differs(h: Harness) -> None:
    p = pod("a")
    fut = h.submit(unsched(p, reason="A"))
    newer = pod("a", rv=7, conditions=(cond(reason="Other"),))
    h.ref("uid-a").tell(Observed(newer))
    taken = h.take("uid-a")
    assert taken is not None and taken.obj is newer  # sent against the newest object
    h.done("uid-a", taken)
    assert fut.result(timeout=5) is Outcome.SUCCESS


def test_stale_informer_update_is_ignored(h: Harness) -> None:
    p = pod("a", rv=9)
    h.submit(unsched(p))
    h.ref("uid-a").tell(Observed(pod("a", rv=3, conditions=(cond(),))))
    taken = h.take("uid-a")
    assert taken is not None and taken.obj is p


# ---------------------------------------------------------------- beyond upstream


def test_deletion_cancels_everything_pending_and_tombstones(h: Harness) -> None:
    p = pod("a")
    fut = h.submit(PodBinding.for_pod(p, "n1"))
    h.ref("uid-a").tell(Deleted(p))
    assert outcome(fut) is CallCancelled
    assert h.registry.is_tombstoned("uid-a")
    # a late event cannot resurrect it
    assert not h.registry.tell("uid-a", Observed(pod("a", rv=9)))
    assert h.registry.get("uid-a") is None


def test_deletion_with_call_in_flight_resolves_it_when_done(h: Harness) -> None:
    p = pod("a")
    f1 = h.submit(unsched(p, reason="A"))
    t1 = h.take("uid-a")
    assert t1 is not None
    f2 = h.submit(unsched(p, reason="B"))
    ref = h.ref("uid-a")
    ref.tell(Deleted(p))
    assert outcome(f2) is CallCancelled
    assert not f1.done()
    ref.tell(Done(t1.call, Result.NOT_FOUND, error=None))
    assert outcome(f1) is ObjectNotFound
    assert ref.actor_stopped.wait(5)


def test_preemption_cancels_pending_and_runs_the_deletion(h: Harness) -> None:
    p = pod("a")
    f_patch = h.submit(unsched(p))
    f_pre = h.submit(PodPreemption.for_pod(p, preemptor="hi"))
    assert outcome(f_patch) is CallCancelled
    taken = h.take("uid-a")
    assert taken is not None and taken.call.call_type == "pod_preemption"
    # nothing may queue behind a deletion
    assert outcome(h.submit(PodBinding.for_pod(p, "n1"))) is CallCancelled
    ref = h.ref("uid-a")
    h.done("uid-a", taken)
    assert f_pre.result(timeout=5) is Outcome.SUCCESS
    assert ref.actor_stopped.wait(5)
    assert h.registry.is_tombstoned("uid-a")


def test_preemption_of_terminating_pod_is_skipped(h: Harness) -> None:
    fut = h.submit(PodPreemption.for_pod(pod("a", terminating=True)))
    assert fut.result(timeout=5) is Outcome.SKIPPED


def test_repeated_preemption_while_deletion_in_flight_is_skipped(h: Harness) -> None:
    p = pod("a")
    h.submit(PodPreemption.for_pod(p))
    taken = h.take("uid-a")
    assert taken is not None
    assert h.submit(PodPreemption.for_pod(p)).result(timeout=5) is Outcome.SKIPPED


def test_caller_cancellation_withdraws_queued_call(h: Harness) -> None:
    fut = h.submit(unsched(pod("a")))
    h.ref("uid-a").tell(Cancel("pod_binding"))  # other type: untouched
    h.sync("uid-a")
    assert not fut.done()
    h.ref("uid-a").tell(Cancel(None))
    assert outcome(fut) is CallCancelled
    assert h.take("uid-a") is None


def test_cancel_cannot_recall_call_in_flight(h: Harness) -> None:
    fut = h.submit(unsched(pod("a")))
    taken = h.take("uid-a")
    assert taken is not None
    h.ref("uid-a").tell(Cancel())
    h.done("uid-a", taken)
    assert fut.result(timeout=5) is Outcome.SUCCESS


@pytest.mark.parametrize(
    "p", [pod("a", node="other"), pod("a", terminating=True)], ids=["bound", "terminating"]
)
def test_binding_for_bound_or_terminating_pod_fails_fast(h: Harness, p: Obj) -> None:
    assert outcome(h.submit(PodBinding.for_pod(p, "n1"))) is CallConflict


def test_binding_already_bound_to_same_node_is_skipped(h: Harness) -> None:
    assert h.submit(PodBinding.for_pod(pod("a", node="n1"), "n1")).result(timeout=5) is (
        Outcome.SKIPPED
    )


def test_view_applies_in_flight_and_pending_mutations(h: Harness) -> None:
    p = pod("a")
    h.submit(PodStatusPatch.for_pod(p, nominated_node_name="n3"))
    taken = h.take("uid-a")
    assert taken is not None
    h.submit(PodBinding.for_pod(p, "n3"))
    view = h.view("uid-a")
    assert view is not None
    assert view["status"]["nominatedNodeName"] == "n3"
    assert view["spec"]["nodeName"] == "n3"
    assert "nodeName" not in p["spec"]  # never mutated


def test_retry_backs_off_then_fails_after_max_attempts(h: Harness) -> None:
    fut = h.submit(unsched(pod("a")))
    for attempt in (1, 2):
        taken = h.take("uid-a")
        assert taken is not None and taken.attempt == attempt
        h.done("uid-a", taken, Result.RETRY, error=ServerError("boom"), delay=1.0)
        h.sync("uid-a")
        ready = h.readies()[-1]
        assert ready.not_before == pytest.approx(h.clock.now + 1.0)
        assert h.take("uid-a") is None  # backing off
        h.clock.now += 1.0
    taken = h.take("uid-a")
    assert taken is not None and taken.attempt == 3
    h.done("uid-a", taken, Result.RETRY, error=ServerError("boom"), delay=1.0)
    exc = fut.exception(timeout=5)
    assert isinstance(exc, CallFailed) and isinstance(exc.cause, ServerError)


def test_retry_merges_with_call_that_arrived_meanwhile(h: Harness) -> None:
    p = pod("a")
    f1 = h.submit(PodStatusPatch.for_pod(p, conditions=[cond(reason="A")]))
    t1 = h.take("uid-a")
    assert t1 is not None
    f2 = h.submit(PodStatusPatch.for_pod(p, nominated_node_name="n1"))
    h.done("uid-a", t1, Result.RETRY, error=ServerError(), delay=0.0)
    assert f1.result(timeout=5) is Outcome.OVERWRITTEN
    t2 = h.take("uid-a")
    assert isinstance(t2, Job) and isinstance(t2.call, PodStatusPatch)
    assert t2.call.nominated_node_name == "n1" and len(t2.call.conditions) == 1
    h.done("uid-a", t2)
    assert f2.result(timeout=5) is Outcome.SUCCESS


def test_conflict_rebases_on_fresh_object(h: Harness) -> None:
    fut = h.submit(unsched(pod("a"), reason="A"))
    t1 = h.take("uid-a")
    assert t1 is not None
    fresh = pod("a", rv=4, conditions=(cond(reason="X"),))
    h.done("uid-a", t1, Result.CONFLICT, obj=fresh, error=ConflictError())
    t2 = h.take("uid-a")
    assert t2 is not None and t2.obj is fresh
    h.done("uid-a", t2)
    assert fut.result(timeout=5) is Outcome.SUCCESS


def test_conflict_that_makes_call_noop_resolves_skipped(h: Harness) -> None:
    fut = h.submit(unsched(pod("a"), reason="A"))
    t1 = h.take("uid-a")
    assert t1 is not None
    fresh = pod("a", rv=4, conditions=(cond(reason="A"),))
    h.done("uid-a", t1, Result.CONFLICT, obj=fresh, error=ConflictError())
    assert h.take("uid-a") is None
    assert fut.result(timeout=5) is Outcome.SKIPPED


def test_conflicts_are_bounded(h: Harness) -> None:
    fut = h.submit(unsched(pod("a"), reason="A"))
    for _ in range(3):
        taken = h.take("uid-a")
        assert taken is not None
        h.done("uid-a", taken, Result.CONFLICT, obj=None, error=ConflictError())
    assert outcome(fut) is CallConflict


def test_not_found_fails_call_cancels_pending_and_retires(h: Harness) -> None:
    p = pod("a")
    f1 = h.submit(unsched(p, reason="A"))
    t1 = h.take("uid-a")
    assert t1 is not None
    f2 = h.submit(unsched(p, reason="B"))
    h.done("uid-a", t1, Result.NOT_FOUND)
    assert outcome(f1) is ObjectNotFound
    assert outcome(f2) is CallCancelled
    assert h.registry.is_tombstoned("uid-a")


def test_permanent_failure_fails_only_that_call(h: Harness) -> None:
    p = pod("a")
    f1 = h.submit(unsched(p, reason="A"))
    t1 = h.take("uid-a")
    assert t1 is not None
    f2 = h.submit(unsched(p, reason="B"))
    h.done("uid-a", t1, Result.FAILED, error=ValueError("422"))
    assert outcome(f1) is CallFailed
    t2 = h.take("uid-a")
    assert t2 is not None
    h.done("uid-a", t2)
    assert f2.result(timeout=5) is Outcome.SUCCESS


def test_close_resolves_pending_and_in_flight(h: Harness) -> None:
    f1 = h.submit(unsched(pod("a")))
    f2 = h.submit(unsched(pod("b")))
    assert h.take("uid-a") is not None
    for uid in ("uid-a", "uid-b"):
        h.ref(uid).ask(Close(), timeout=5)
    assert outcome(f1) is DispatcherClosed
    assert outcome(f2) is DispatcherClosed
    assert h.resolved == 2


# ---------------------------------------------------------------- crash isolation


@dataclass(frozen=True, slots=True)
class BuggyPatch(Call):
    """A user call type whose merger raises."""

    call_type: ClassVar[str] = "buggy_patch"
    kind: ClassVar[str] = "Pod"
    relevance: ClassVar[int] = 5

    ref: ObjectRef
    value: int = 0
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def merge(self, older: BuggyPatch) -> BuggyPatch:
        raise RuntimeError("merger bug")

    def is_noop(self, obj: Obj | None) -> bool:
        return False

    def apply(self, obj: Obj) -> Obj:
        return obj

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        return obj


def test_crash_fails_that_objects_futures_and_restarts_clean(h: Harness) -> None:
    registry = default_call_types()
    registry.register(BuggyPatch)
    a, b = pod("a"), pod("b")
    fb = h.submit(unsched(b))
    f1 = h.submit(BuggyPatch(ObjectRef.of(a), 1, basis=a))
    old_ref = h.ref("uid-a")
    f2 = h.submit(BuggyPatch(ObjectRef.of(a), 2, basis=a))  # merge raises inside the actor
    assert outcome(f1) is CallFailed
    assert outcome(f2) is CallFailed
    assert old_ref.actor_stopped.wait(5)
    # the object gets a fresh actor; the other object is untouched
    f3 = h.submit(unsched(a))
    taken = h.take("uid-a")
    assert taken is not None and h.ref("uid-a") is not old_ref
    h.done("uid-a", taken)
    assert f3.result(timeout=5) is Outcome.SUCCESS
    assert not fb.done()
    tb = h.take("uid-b")
    assert tb is not None
    h.done("uid-b", tb)
    assert fb.result(timeout=5) is Outcome.SUCCESS
    assert h.ctx.metrics.value("kdispatch_object_actor_failures_total") == 1


# ---------------------------------------------------------------- reaping


def test_idle_actor_is_reaped_busy_one_is_not(h: Harness) -> None:
    fa = h.submit(unsched(pod("a")))
    ta = h.take("uid-a")
    assert ta is not None
    h.done("uid-a", ta)
    assert fa.result(timeout=5) is Outcome.SUCCESS
    h.submit(unsched(pod("b")))  # stays pending
    ref_a, ref_b = h.ref("uid-a"), h.ref("uid-b")
    h.clock.now += 11
    assert h.registry.reap_idle() == 2
    assert ref_a.actor_stopped.wait(5)
    h.sync("uid-b")
    assert h.registry.get("uid-a") is None
    assert h.registry.get("uid-b") is ref_b


@pytest.mark.parametrize("result", [Result.RETRY, Result.CONFLICT])
def test_retry_after_delete_is_cancelled_not_requeued(h: Harness, result: Result) -> None:
    p = pod("a")
    fut = h.submit(unsched(p))
    taken = h.take("uid-a")
    assert taken is not None
    ref = h.ref("uid-a")
    ref.tell(Deleted(p))
    ref.tell(Done(taken.call, result, error=ServerError()))
    assert outcome(fut) is CallCancelled
    assert ref.actor_stopped.wait(5)


def test_pending_preemption_of_a_deleted_pod_succeeds(h: Harness) -> None:
    """The deletion is what a preemption wants: if the pod goes away first, it succeeded."""
    p = pod("a")
    f_patch = h.submit(unsched(p))
    t = h.take("uid-a")
    assert t is not None
    f_pre = h.submit(PodPreemption.for_pod(p))
    h.ref("uid-a").tell(Deleted(p))
    assert f_pre.result(timeout=5) is Outcome.SUCCESS
    h.done("uid-a", t, Result.NOT_FOUND)
    assert outcome(f_patch) is ObjectNotFound


def test_preemption_in_flight_when_pod_deleted_succeeds_on_retry(h: Harness) -> None:
    p = pod("a")
    f_pre = h.submit(PodPreemption.for_pod(p))
    t = h.take("uid-a")
    assert t is not None
    ref = h.ref("uid-a")
    ref.tell(Deleted(p))
    ref.tell(Done(t.call, Result.RETRY, error=ServerError()))
    assert f_pre.result(timeout=5) is Outcome.SUCCESS


def test_success_without_reply_object_updates_the_observed_state(h: Harness) -> None:
    """A binding's reply has no object: the actor applies it, so a later status patch equal to
    the pre-binding condition is not elided against a stale view."""
    p = pod("a", conditions=(cond(),))
    f_bind = h.submit(PodBinding.for_pod(p, "n1"))
    t = h.take("uid-a")
    assert t is not None
    h.done("uid-a", t)
    assert f_bind.result(timeout=5) is Outcome.SUCCESS
    f_patch = h.submit(unsched(p))  # PodScheduled=False again (the pod was bound: True)
    assert h.take("uid-a") is not None
    assert not f_patch.done()


def test_ambiguous_failure_pauses_noop_elision_and_rereads(h: Harness) -> None:
    p = pod("a", rv=1, conditions=(cond(reason="A"),))
    f_lost = h.submit(unsched(p, reason="B"))
    t = h.take("uid-a")
    assert t is not None and t.obj is not None
    h.done("uid-a", t, Result.RETRY, error=ServerError(), delay=0.0)  # maybe applied
    # restoring A is a no-op against what we saw, but the server may hold B now
    f_restore = h.submit(unsched(p, reason="A"))
    assert f_lost.result(timeout=5) is Outcome.OVERWRITTEN
    t2 = h.take("uid-a")
    assert t2 is not None and t2.obj is None  # the attempt re-reads the object first
    h.done("uid-a", t2, obj=pod("a", rv=3, conditions=(cond(reason="A"),)))
    assert f_restore.result(timeout=5) is Outcome.SUCCESS
    # a fresh object restored trust: no-ops are elided again
    assert h.submit(unsched(p, reason="A")).result(timeout=5) is Outcome.SKIPPED


def test_retry_resolves_at_once_when_newer_object_shows_it_applied(h: Harness) -> None:
    p = pod("a", rv=1)
    fut = h.submit(unsched(p, reason="B"))
    t = h.take("uid-a")
    assert t is not None
    h.ref("uid-a").tell(Observed(pod("a", rv=2, conditions=(cond(reason="B"),))))
    h.done("uid-a", t, Result.RETRY, error=ServerError(), delay=30.0)
    assert fut.result(timeout=5) is Outcome.SKIPPED
