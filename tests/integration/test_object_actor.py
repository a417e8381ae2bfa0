"""The object actor's wiring: the shell around :class:`ObjectState` (whose rules
``tests/unit/test_object_state.py`` covers event by event), on a real :class:`ActorPool` and
:class:`Registry`.

The test plays the executor (:class:`FakeExecutor`): it records the actor's ``ready`` calls,
sends ``Grant`` like the executor reserving a token, collects the ``job`` (or ``refund``)
answer and replies ``Done``. An actor handles its inbox in order, so a ``View`` told after a
message is answered only once that message was handled (or, by ``dropped``, once the actor
stopped): no sleeps are needed. The registry notes every ``leave`` (:class:`LeaveLog`), so a
test can wait for an actor to leave. With one pool worker, :meth:`Harness.held` keeps that
worker in another actor's turn, so that messages pile up in an inbox first.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import pytest

from kdispatch import (
    ActorLimitExceeded,
    CallCancelled,
    CallFailed,
    CallFuture,
    DependencyFailed,
    DispatcherClosed,
    Outcome,
    ServerError,
)
from kdispatch.actors.engine import messages as msg
from kdispatch.actors.engine.metrics import Metrics
from kdispatch.actors.engine.object_actor import ActorContext, ObjectActor
from kdispatch.actors.engine.registry import Registry
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.config import RetryConfig
from kdispatch.actors.model.effects import Done, Result, Send
from kdispatch.actors.model.objects import Obj, ObjectRef
from kdispatch.actors.model.pod_calls import PodBinding, PodPreemption, PodStatusPatch
from kdispatch.actors.runtime.pool import Actor, ActorPool
from kdispatch.testing.waiting import wait_for
from tests.clocks import ManualClock
from tests.factories import InertCall, cond, pod

pytestmark = pytest.mark.timeout(30)

WAIT = 5.0  # generous bound for waits that must succeed; never used to sequence anything
PENDING = "scheduler_pending_async_api_calls"
FAILURES = "kdispatch_object_actor_failures_total"


class Job(NamedTuple):
    """A grant's answer, as the fake executor keeps it."""

    actor: Any
    send: Send


class FakeExecutor:
    """What the actor sees of the executor. ``on_spot``: ``ready`` grants at once;
    ``inline``: ``job`` answers with this Done at once (a non-blocking backend). Called on
    pool threads."""

    def __init__(self) -> None:
        self.readies: queue.Queue[tuple[str, int, float]] = queue.Queue()
        self.answers: queue.Queue[Job | None] = queue.Queue()  # None: a refund
        self.refunds = 0
        self.left_blocks: queue.Queue[str] = queue.Queue()  # leave_block's uids
        self.on_spot = False
        self.inline: Result | None = None

    def ready(self, uid: str, actor: Any, relevance: int, not_before: float) -> bool:
        self.readies.put((uid, relevance, not_before))
        return self.on_spot

    def job(self, actor: Any, send: Send) -> Done | None:
        self.answers.put(Job(actor, send))
        if self.inline is not None:
            return Done(send.call, self.inline)
        return None

    def refund(self, uid: str | None = None) -> None:
        self.refunds += 1
        self.answers.put(None)

    def leave_block(self, uid: str) -> None:
        self.left_blocks.put(uid)


class LeaveLog(Registry):
    """The registry, noting every ``leave`` in ``left`` as ``(uid, actor, tombstone)``; a
    hook set in ``after_leave`` runs once, on the leaving actor's turn, right after it."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.left: queue.Queue[tuple[str, Actor, bool]] = queue.Queue()
        self.after_leave: Callable[[], None] | None = None

    def leave(self, uid: str, actor: Actor, *, tombstone: bool = False) -> None:
        super().leave(uid, actor, tombstone=tombstone)
        self.left.put((uid, actor, tombstone))
        hook, self.after_leave = self.after_leave, None
        if hook is not None:
            hook()


class Blocker(Actor):
    """Holds a pool worker in its turn until ``release`` is set."""

    __slots__ = ("entered", "release")

    def __init__(self, pool: ActorPool) -> None:
        super().__init__(pool)
        self.entered, self.release = threading.Event(), threading.Event()

    def receive(self, message: Any) -> None:
        self.entered.set()
        assert self.release.wait(WAIT)


class Harness:
    """An object-actor world with the test as its executor."""

    def __init__(self, workers: int = 2, **registry: Any) -> None:
        self.clock = ManualClock(100.0)
        self.pool = ActorPool(workers=workers, name="objects")
        self.pool.start()
        self.registry = LeaveLog(idle_timeout=10.0, clock=self.clock, **registry)
        self.executor = FakeExecutor()
        self.resolved: list[Any] = []  # the calls of the futures on_resolved was told of
        self.ctx = ActorContext(
            registry=self.registry,
            executor=self.executor,
            metrics=Metrics(),
            retry=RetryConfig(max_attempts=3, max_conflict_retries=2),
            pool=self.pool,
            clock=self.clock,
            on_resolved=lambda future: self.resolved.append(future.call),
        )

    def submit(self, call: Call, holds: frozenset[Any] = frozenset()) -> CallFuture:
        fut = CallFuture()
        fut.call = call  # as the dispatcher tags it
        assert self.registry.tell(call.ref.uid, msg.Submit(call, fut, holds), self.ctx.spawn)
        return fut

    def actor(self, uid: str) -> ObjectActor:
        actor = self.registry.get(uid)
        assert isinstance(actor, ObjectActor), f"no actor for {uid}"
        return actor

    def tell(self, uid: str, message: object) -> None:
        assert self.actor(uid).tell(message)

    def take(self, uid: str) -> Job | None:
        """Grant a token to the object; return its Job, or None if it refunded."""
        self.tell(uid, msg.Grant(self.clock()))
        return self.executor.answers.get(timeout=WAIT)

    def done(self, job: Job, result: Result = Result.SUCCESS, **kw: Any) -> None:
        """The executor's answer to ``job``, to the actor that handed it over."""
        assert job.actor.tell(Done(job.send.call, result, **kw))

    def view_of(self, actor: ObjectActor) -> Obj | None:
        """``actor``'s view once it handled everything told before (None from ``dropped``
        if it stopped meanwhile)."""
        reply: Future[Obj | None] = Future()
        assert actor.tell(msg.View(reply)), f"{actor!r} has stopped"
        return reply.result(WAIT)

    def sync(self, uid: str) -> Obj | None:
        """Wait until the actor of ``uid`` handled everything told so far; its view."""
        return self.view_of(self.actor(uid))

    def left(self) -> tuple[str, Actor, bool]:
        """The next actor to leave the registry: ``(uid, actor, tombstone)``."""
        return self.registry.left.get(timeout=WAIT)

    def readies(self) -> list[tuple[str, int, float]]:
        out = []
        while True:
            try:
                out.append(self.executor.readies.get_nowait())
            except queue.Empty:
                return out

    def pending(self, call_type: str) -> float:
        return self.ctx.metrics.value(PENDING, call_type=call_type)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Keep a pool worker in another actor's turn for the block (with one worker, every
        message told meanwhile waits in its inbox)."""
        blocker = Blocker(self.pool)
        assert blocker.tell("hold")
        assert blocker.entered.wait(WAIT)
        try:
            yield
        finally:
            blocker.release.set()

    def close(self) -> None:
        self.pool.stop(timeout=WAIT)
        self.registry.abandon_all()


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.close()


@pytest.fixture
def h1() -> Iterator[Harness]:
    """One pool worker, for :meth:`Harness.held`."""
    harness = Harness(workers=1)
    yield harness
    harness.close()


def unsched(p: Obj, reason: str = "Unschedulable") -> PodStatusPatch:
    return PodStatusPatch.for_pod(p, conditions=[cond(reason=reason)])


def outcome(fut: Future[Outcome]) -> Any:
    try:
        return fut.result(timeout=WAIT)
    except Exception as exc:
        return type(exc)


# ---------------------------------------------------------------- messages reach the machine


def test_submit_grant_job_done_resolve_the_future(h: Harness) -> None:
    p = pod("a")
    call = unsched(p)
    fut = h.submit(call)
    h.sync("uid-a")
    assert h.pending("pod_status_patch") == 1
    job = h.take("uid-a")
    assert job is not None and job.send.call is call and job.send.obj is p
    assert job.actor is h.actor("uid-a")  # the worker answers this actor
    assert h.readies() == [("uid-a", 1, 0.0)]
    assert not fut.done()
    h.done(job)
    assert fut.result(timeout=WAIT) is Outcome.SUCCESS
    h.sync("uid-a")
    assert h.resolved == [call]
    assert h.pending("pod_status_patch") == 0


def test_calls_for_different_objects_do_not_interact(h: Harness) -> None:
    fa = h.submit(unsched(pod("a")))
    fb = h.submit(PodBinding.for_pod(pod("b"), "n1"))
    ja, jb = h.take("uid-a"), h.take("uid-b")
    assert ja is not None and jb is not None
    assert ja.send.call.call_type == "pod_status_patch"
    assert jb.send.call.call_type == "pod_binding"
    h.done(jb)
    assert fb.result(timeout=WAIT) is Outcome.SUCCESS
    assert not fa.done()
    h.done(ja)
    assert fa.result(timeout=WAIT) is Outcome.SUCCESS


def test_a_grant_with_nothing_to_send_is_refunded(h: Harness) -> None:
    fut = h.submit(unsched(pod("a", conditions=(cond(),))))
    assert fut.result(timeout=WAIT) is Outcome.SKIPPED
    assert h.take("uid-a") is None
    assert h.executor.refunds == 1


def test_grant_on_the_spot_sends_in_the_same_turn(h: Harness) -> None:
    h.executor.on_spot = True
    fut = h.submit(unsched(pod("a")))
    job = h.executor.answers.get(timeout=WAIT)  # no Grant message was needed
    assert job is not None
    h.done(job)
    assert fut.result(timeout=WAIT) is Outcome.SUCCESS


def test_inline_executor_resolves_the_call_in_one_turn(h: Harness) -> None:
    h.executor.on_spot = True
    h.executor.inline = Result.SUCCESS
    fut = h.submit(unsched(pod("a")))
    assert fut.result(timeout=WAIT) is Outcome.SUCCESS


def test_informer_cancel_and_view_messages_reach_the_machine(h: Harness) -> None:
    p = pod("a")
    f1 = h.submit(PodStatusPatch.for_pod(p, nominated_node_name="n3"))
    h.tell("uid-a", msg.Observed(pod("a", rv=2, nnn="n3")))
    assert f1.result(timeout=WAIT) is Outcome.SKIPPED
    f2 = h.submit(unsched(p))
    view = h.sync("uid-a")
    assert view is not None and view["status"]["conditions"][0]["reason"] == "Unschedulable"
    h.tell("uid-a", msg.Cancel("pod_status_patch"))
    assert outcome(f2) is CallCancelled


def test_withdraw_resolves_that_call_only(h: Harness) -> None:
    mine = h.submit(unsched(pod("a")))
    h.tell("uid-a", msg.Withdraw(CallFuture()))  # a call this object does not have
    h.sync("uid-a")
    assert not mine.done()
    h.tell("uid-a", msg.Withdraw(mine))
    assert outcome(mine) is CallCancelled


def test_revoke_resolves_calls_not_sent_with_its_error(h: Harness) -> None:
    fut = h.submit(unsched(pod("a")))
    lost = DispatcherClosed("leadership lost")
    h.tell("uid-a", msg.Revoke(lost))
    with pytest.raises(DispatcherClosed, match="leadership lost"):
        fut.result(timeout=WAIT)


def test_held_submit_waits_for_release_and_fails_with_its_dependency(h: Harness) -> None:
    held = h.submit(unsched(pod("a")), frozenset({"t1"}))
    failing = h.submit(PodBinding.for_pod(pod("b"), "n1"), frozenset({"t2"}))
    h.sync("uid-a")
    h.sync("uid-b")
    assert h.readies() == []  # held calls ask the executor for nothing
    cause = ServerError("reservation failed")
    h.tell("uid-b", msg.FailDependency("t2", cause))
    assert outcome(failing) is DependencyFailed
    error = failing.exception()
    assert isinstance(error, DependencyFailed) and error.cause is cause
    h.tell("uid-a", msg.Release("t1"))
    h.sync("uid-a")
    assert h.readies() == [("uid-a", 1, 0.0)]
    job = h.take("uid-a")
    assert job is not None
    h.done(job)
    assert held.result(timeout=WAIT) is Outcome.SUCCESS


def test_retry_delay_reaches_the_executor_as_not_before(h: Harness) -> None:
    fut = h.submit(PodBinding.for_pod(pod("a"), "n1"))
    job = h.take("uid-a")
    assert job is not None
    h.readies()
    h.done(job, Result.RETRY, error=ServerError(), delay=2.0)
    h.sync("uid-a")
    assert h.readies() == [("uid-a", 2, 102.0)]
    assert not fut.done()


def test_a_view_whose_apply_raises_fails_the_view_not_the_actor(h: Harness) -> None:
    a = pod("a")
    fut = h.submit(BuggyPatch(ObjectRef.of(a), 1, basis=a, bad_apply=True))
    actor = h.actor("uid-a")
    h.tell("uid-a", msg.Observed(a))
    reply: Future[Obj | None] = Future()
    h.tell("uid-a", msg.View(reply))
    with pytest.raises(RuntimeError, match="apply bug"):
        reply.result(timeout=WAIT)
    assert h.actor("uid-a") is actor and not actor.stopped and not fut.done()
    h.tell("uid-a", msg.Cancel())
    assert outcome(fut) is CallCancelled
    assert h.sync("uid-a") == a  # nothing pending: the observed object as it is


def test_submit_while_closing_resolves_dispatcher_closed(h: Harness) -> None:
    pending = h.submit(unsched(pod("a")))
    h.sync("uid-a")
    h.ctx.closing = True
    late = unsched(pod("a"))
    assert outcome(h.submit(late)) is DispatcherClosed
    h.sync("uid-a")
    assert h.resolved == [late] and not pending.done()


# ---------------------------------------------------------------- retiring


def test_deletion_cancels_pending_tombstones_and_stops(h: Harness) -> None:
    p = pod("a")
    fut = h.submit(PodBinding.for_pod(p, "n1"))
    actor = h.actor("uid-a")
    h.tell("uid-a", msg.Deleted(p))
    assert outcome(fut) is CallCancelled
    assert h.left() == ("uid-a", actor, False)
    assert actor.stopped
    assert h.registry.is_tombstoned("uid-a")
    # a late event cannot resurrect it
    assert not h.registry.tell("uid-a", msg.Observed(pod("a", rv=9)))
    assert not h.registry.tell("uid-a", msg.Submit(unsched(p), CallFuture()), h.ctx.spawn)
    assert h.registry.get("uid-a") is None


def test_deletion_with_call_in_flight_stops_once_it_is_done(h: Harness) -> None:
    p = pod("a")
    f1 = h.submit(unsched(p))
    job = h.take("uid-a")
    assert job is not None
    actor = h.actor("uid-a")
    h.tell("uid-a", msg.Deleted(p))
    h.sync("uid-a")
    assert not actor.stopped and not f1.done()
    assert h.registry.left.empty()
    h.done(job, Result.NOT_FOUND)
    assert h.left()[1] is actor
    assert actor.stopped and f1.done()


def test_preemption_success_retires_the_actor(h: Harness) -> None:
    p = pod("a")
    fut = h.submit(PodPreemption.for_pod(p))
    job = h.take("uid-a")
    assert job is not None
    actor = h.actor("uid-a")
    h.done(job)
    assert fut.result(timeout=WAIT) is Outcome.SUCCESS
    assert h.left()[1] is actor
    assert actor.stopped
    assert h.registry.is_tombstoned("uid-a")


def test_close_resolves_pending_and_in_flight(h: Harness) -> None:
    c1, c2 = unsched(pod("a")), unsched(pod("b"))
    f1, f2 = h.submit(c1), h.submit(c2)
    assert h.take("uid-a") is not None  # c1 in flight, c2 pending
    actors = {h.actor("uid-a"), h.actor("uid-b")}
    for uid in ("uid-a", "uid-b"):
        h.tell(uid, msg.Close())
    assert outcome(f1) is DispatcherClosed
    assert outcome(f2) is DispatcherClosed
    assert {h.left()[1], h.left()[1]} == actors  # both stopped, after resolving
    assert sorted(h.resolved, key=id) == sorted([c1, c2], key=id)
    # the gauge moves after the turn's effects, the leave among them
    wait_for(lambda: h.pending("pod_status_patch") == 0, WAIT, "the pending gauge to drop")


# ---------------------------------------------------------------- crash isolation


@dataclass(frozen=True, slots=True)
class BuggyPatch(InertCall):
    """A user call type whose merger raises, whose precheck raises once ``armed``, and whose
    ``apply`` raises with ``bad_apply``; its send answers the object it was given."""

    call_type: ClassVar[str] = "buggy_patch"
    relevance: ClassVar[int] = 5

    value: int = 0
    bad_apply: bool = False
    armed: list[bool] = field(default_factory=lambda: [False], compare=False)

    def merge(self, older: BuggyPatch) -> BuggyPatch:
        raise RuntimeError("merger bug")

    def precheck(self, obj: Obj | None) -> str | None:
        if self.armed[0]:
            raise RuntimeError("precheck bug")
        return None

    def apply(self, obj: Obj) -> Obj:
        if self.bad_apply:
            raise RuntimeError("apply bug")
        return obj

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        return obj


def test_crash_fails_that_objects_futures_and_queued_messages_reach_a_clean_actor(
    h1: Harness,
) -> None:
    h = h1
    a, b = pod("a"), pod("b")
    fb = h.submit(unsched(b))
    with h.held():  # the only pool worker is busy: what follows waits in the inbox
        f1 = h.submit(BuggyPatch(ObjectRef.of(a), 1, basis=a))
        old = h.actor("uid-a")
        f2 = h.submit(BuggyPatch(ObjectRef.of(a), 2, basis=a))  # merge raises in the actor
        f3 = h.submit(unsched(a))  # queued behind the crash: rerouted by dropped()
        h.tell("uid-a", msg.Grant(h.clock()))  # queued behind the crash: refunded
    assert outcome(f1) is CallFailed
    assert outcome(f2) is CallFailed
    error = f1.exception()
    assert isinstance(error, CallFailed) and str(error.cause) == "merger bug"
    assert h.left() == ("uid-a", old, False)  # left, not tombstoned
    assert h.executor.answers.get(timeout=WAIT) is None  # the late Grant was refunded
    assert old.stopped
    # the object got a fresh actor, which holds f3; the other object is untouched
    new = h.actor("uid-a")
    assert new is not old
    job = h.take("uid-a")
    assert job is not None and job.send.call.call_type == "pod_status_patch"
    assert job.actor is new
    h.done(job)
    assert f3.result(timeout=WAIT) is Outcome.SUCCESS
    assert not fb.done()
    jb = h.take("uid-b")
    assert jb is not None
    h.done(jb)
    assert fb.result(timeout=WAIT) is Outcome.SUCCESS
    h.sync("uid-a")
    assert h.ctx.metrics.value(FAILURES) == 1
    assert h.pending("buggy_patch") == 0  # the crashed actor took its calls off the gauge
    assert h.pending("pod_status_patch") == 0


def test_crash_while_holding_a_grant_refunds_it(h: Harness) -> None:
    a = pod("a")
    call = BuggyPatch(ObjectRef.of(a), 1, basis=a)
    fut = h.submit(call)
    h.sync("uid-a")
    assert h.pending("buggy_patch") == 1
    call.armed[0] = True  # the precheck at grant raises
    old = h.actor("uid-a")
    h.tell("uid-a", msg.Grant(h.clock()))
    assert outcome(fut) is CallFailed
    assert h.executor.answers.get(timeout=WAIT) is None  # the slot and token went back
    assert h.executor.refunds == 1
    assert h.left() == ("uid-a", old, False)
    assert h.registry.get("uid-a") is None  # forgotten, not tombstoned
    assert not h.registry.is_tombstoned("uid-a")
    assert h.pending("buggy_patch") == 0


def test_a_message_the_actor_cannot_handle_crashes_it(h: Harness) -> None:
    fut = h.submit(unsched(pod("a")))
    old = h.actor("uid-a")
    h.tell("uid-a", "not a message")
    error = fut.exception(timeout=WAIT)
    assert isinstance(error, CallFailed) and isinstance(error.cause, TypeError)
    assert h.left()[1] is old
    assert h.ctx.metrics.value(FAILURES) == 1


# ---------------------------------------------------------------- leftovers of a stopped actor


def test_leftovers_of_a_crashed_actor_are_rerouted_refunded_or_answered(h1: Harness) -> None:
    """Messages queued behind a crash reach ``dropped``: a ``Submit`` spawns the object's
    next actor, and ``Observed``, ``Release`` and ``FailDependency`` follow it there; a
    ``Grant`` is refunded and a ``View`` answered None."""
    h = h1
    a = pod("a")
    other = BuggyPatch(ObjectRef.of(a), 1, basis=a)  # a call type the patch leaves alone
    doomed = h.submit(unsched(a))
    old = h.actor("uid-a")
    view: Future[Obj | None] = Future()
    cause = ServerError("prerequisite failed")
    held = CallFuture()
    failing = CallFuture()
    with h.held():
        h.tell("uid-a", "crash")
        h.tell("uid-a", msg.Submit(unsched(a, reason="Again"), held, frozenset({"t1"})))
        h.tell("uid-a", msg.Submit(other, failing, frozenset({"t2"})))
        h.tell("uid-a", msg.Observed(pod("a", rv=5)))
        h.tell("uid-a", msg.Release("t1"))
        h.tell("uid-a", msg.FailDependency("t2", cause))
        h.tell("uid-a", msg.Grant(h.clock()))
        h.tell("uid-a", msg.View(view))
    assert outcome(doomed) is CallFailed
    assert h.left()[1] is old
    assert view.result(timeout=WAIT) is None
    assert h.executor.answers.get(timeout=WAIT) is None  # the Grant, refunded
    error = failing.exception(timeout=WAIT)
    assert isinstance(error, DependencyFailed) and error.cause is cause
    new = h.actor("uid-a")
    assert new is not old
    seen = h.sync("uid-a")
    assert seen is not None and seen["metadata"]["resourceVersion"] == "5"  # the Observed
    job = h.take("uid-a")  # released: the held call is sent
    assert job is not None and job.actor is new
    assert job.send.call == unsched(a, reason="Again")
    h.done(job)
    assert held.result(timeout=WAIT) is Outcome.SUCCESS
    assert h.registry.dropped == 0


def test_cancel_withdraw_and_revoke_follow_the_object_to_its_next_actor(h1: Harness) -> None:
    h = h1
    c = pod("c")
    doomed = h.submit(unsched(c))
    patch, buggy, binding = CallFuture(), CallFuture(), CallFuture()
    hold = frozenset({"never"})  # nothing is sent: each call waits for its message
    lost = DispatcherClosed("leadership lost")
    with h.held():
        h.tell("uid-c", "crash")
        h.tell("uid-c", msg.Submit(unsched(c, reason="Again"), patch, hold))
        h.tell("uid-c", msg.Submit(BuggyPatch(ObjectRef.of(c), 1, basis=c), buggy, hold))
        h.tell("uid-c", msg.Withdraw(patch))
        h.tell("uid-c", msg.Cancel("buggy_patch"))
        h.tell("uid-c", msg.Submit(PodBinding.for_pod(c, "n1"), binding, hold))
        h.tell("uid-c", msg.Revoke(lost))
    assert outcome(doomed) is CallFailed
    assert outcome(patch) is CallCancelled
    assert outcome(buggy) is CallCancelled
    with pytest.raises(DispatcherClosed, match="leadership lost"):
        binding.result(timeout=WAIT)
    assert h.registry.dropped == 0


def test_a_submit_left_when_the_dispatcher_closes_resolves_dispatcher_closed(
    h1: Harness,
) -> None:
    h = h1
    h.submit(unsched(pod("a")))
    late = CallFuture()
    with h.held():
        h.tell("uid-a", "crash")
        h.tell("uid-a", msg.Submit(unsched(pod("a"), reason="Again"), late))
        h.ctx.closing = True
    assert outcome(late) is DispatcherClosed
    h.left()
    assert h.registry.get("uid-a") is None  # nothing was spawned for it


def test_a_submit_left_by_a_deleted_object_is_cancelled(h1: Harness) -> None:
    h = h1
    p = pod("a")
    h.submit(unsched(p))
    late = CallFuture()
    with h.held():
        h.tell("uid-a", msg.Deleted(p))
        h.tell("uid-a", msg.Submit(unsched(p, reason="Again"), late))
        h.tell("uid-a", msg.Observed(pod("a", rv=3)))
    error = late.exception(timeout=WAIT)
    assert isinstance(error, CallCancelled) and "deleted" in str(error)
    assert h.left()[2] is False  # left after tombstoning the UID itself
    assert h.registry.get("uid-a") is None and h.registry.is_tombstoned("uid-a")
    assert h.registry.dropped == 2  # the rerouted Submit and Observed


def test_a_submit_left_when_max_live_is_reached_fails() -> None:
    h = Harness(workers=1, max_live=1)
    try:
        h.submit(unsched(pod("a")))
        late = CallFuture()
        with h.held():
            h.tell("uid-a", "crash")
            h.tell("uid-a", msg.Submit(unsched(pod("a"), reason="Again"), late))

            def fill_the_cap() -> None:  # another object takes the place the crash freed
                h.submit(unsched(pod("b")))

            h.registry.after_leave = fill_the_cap
        error = late.exception(timeout=WAIT)
        assert isinstance(error, CallFailed) and isinstance(error.cause, ActorLimitExceeded)
        assert h.registry.live_count() == 1 and h.registry.get("uid-b") is not None
    finally:
        h.close()


# ---------------------------------------------------------------- reaping


def test_idle_actor_is_reaped_busy_one_is_not(h: Harness) -> None:
    fa = h.submit(unsched(pod("a")))
    ja = h.take("uid-a")
    assert ja is not None
    h.done(ja)
    assert fa.result(timeout=WAIT) is Outcome.SUCCESS
    h.submit(unsched(pod("b")))  # stays pending
    ref_a, ref_b = h.actor("uid-a"), h.actor("uid-b")
    h.sync("uid-a")
    h.sync("uid-b")
    assert ref_a.idle_since == 100.0 and ref_b.idle_since is None
    h.clock.now += 11
    assert h.registry.reap_idle() == 1  # "uid-b" is not idle: not even asked
    assert h.left() == ("uid-a", ref_a, False)
    assert ref_a.stopped and h.registry.get("uid-a") is None
    assert h.registry.get("uid-b") is ref_b
    # a new call for the reaped object gets a new actor
    fut = h.submit(unsched(pod("a", rv=2), reason="Again"))
    assert h.actor("uid-a") is not ref_a
    job = h.take("uid-a")
    assert job is not None
    h.done(job)
    assert fut.result(timeout=WAIT) is Outcome.SUCCESS


def test_reap_leaves_only_when_idle(h: Harness) -> None:
    fut = h.submit(unsched(pod("a")))
    actor = h.actor("uid-a")
    h.tell("uid-a", msg.Reap())  # a call is pending: it stays
    h.sync("uid-a")
    assert not actor.stopped and h.registry.left.empty()
    job = h.take("uid-a")
    assert job is not None
    h.tell("uid-a", msg.Reap())  # a call is in flight: it stays
    h.sync("uid-a")
    assert not actor.stopped and h.registry.left.empty()
    h.done(job)
    assert fut.result(timeout=WAIT) is Outcome.SUCCESS
    h.tell("uid-a", msg.Reap())
    assert h.left() == ("uid-a", actor, False)
    assert actor.stopped


def test_a_message_queued_behind_a_reap_keeps_the_actor(h1: Harness) -> None:
    h = h1
    assert h.registry.tell("uid-a", msg.Observed(pod("a")), h.ctx.spawn)
    actor = h.actor("uid-a")
    with h.held():
        h.tell("uid-a", msg.Reap())  # idle, but a message waits behind it
        h.tell("uid-a", msg.Observed(pod("a", rv=2)))
    seen = h.sync("uid-a")
    assert seen is not None and seen["metadata"]["resourceVersion"] == "2"
    assert h.actor("uid-a") is actor and not actor.stopped and h.registry.left.empty()


def test_an_actor_busy_again_is_not_reaped_before_it_was_idle_for_the_timeout(
    h: Harness,
) -> None:
    """RegistryConfig: "an object actor with nothing pending or in flight for this long is
    stopped". An actor idle since t=100, busy at t=108 and idle again right after, has been
    idle for 3 s at t=111: a reaping pass then must leave it alone (idle_timeout is 10 s)."""
    first = h.submit(unsched(pod("a")))
    job = h.take("uid-a")
    assert job is not None
    h.done(job)
    assert first.result(timeout=WAIT) is Outcome.SUCCESS
    h.sync("uid-a")
    actor = h.actor("uid-a")
    assert actor.idle_since == 100.0
    h.clock.now = 108.0
    again = h.submit(unsched(pod("a", rv=2), reason="Again"))  # busy again
    h.tell("uid-a", msg.Cancel())
    assert outcome(again) is CallCancelled
    h.sync("uid-a")  # idle again since 108
    h.clock.now = 111.0
    assert h.registry.reap_idle() == 0
    assert h.registry.get("uid-a") is actor


def test_a_call_admitted_while_a_ready_is_held_counts_as_pending(h: Harness) -> None:
    """The pending-calls gauge counts every call waiting on its object. A binding asks the
    executor for a grant and is cancelled; the executor still holds the object's Ready, so a
    status patch submitted next makes no effect of its own: it is counted all the same."""
    cancelled = h.submit(PodBinding.for_pod(pod("a"), "n1"))
    h.tell("uid-a", msg.Cancel())
    assert outcome(cancelled) is CallCancelled
    patch = h.submit(unsched(pod("a")))
    h.sync("uid-a")
    assert not patch.done()
    assert h.pending("pod_status_patch") == 1


def test_a_release_that_leaves_the_next_call_held_takes_the_object_out_of_its_token_block(
    h: Harness,
) -> None:
    """A gang member's binding merged with another caller's held binding holds both tokens:
    the gate's release leaves it held, so the object leaves its gang's token block (which
    would hold every lane waiting for it); the last release sends it."""
    a = pod("a")
    other = h.submit(PodBinding.for_pod(a, "n1"), frozenset({"claim"}))
    member = h.submit(PodBinding.for_pod(a, "n1"), frozenset({"gate"}))
    assert outcome(other) is Outcome.OVERWRITTEN  # merged into the member's entry
    h.tell("uid-a", msg.Release("gate"))
    h.sync("uid-a")
    assert h.executor.left_blocks.get_nowait() == "uid-a"
    assert h.readies() == []
    h.tell("uid-a", msg.Release("claim"))
    h.sync("uid-a")
    assert h.executor.left_blocks.empty()  # nothing held any more: granted as usual
    job = h.take("uid-a")
    assert job is not None and job.send.call == PodBinding.for_pod(a, "n1")
    h.done(job)
    assert outcome(member) is Outcome.SUCCESS


def test_a_confirm_is_answered_once_everything_told_before_was_handled(h1: Harness) -> None:
    """A gang's Confirm comes after what its actor was told before (a deletion), even when
    that actor stopped: then the message is answered for it."""
    h = h1
    b = pod("b")
    answered: list[bool] = []
    with h.held():  # the Submit, the Deleted and the Confirm wait in b's inbox
        member = h.submit(PodBinding.for_pod(b, "n1"), frozenset({"gate"}))
        h.tell("uid-b", msg.Deleted(b))
        h.tell("uid-b", msg.Confirm(lambda: answered.append(member.done())))
    assert h.left()[0] == "uid-b"  # retired: the Confirm went to its dropped()
    assert outcome(member) is CallCancelled
    assert wait_for(lambda: answered, WAIT, "the confirmation") == [True]
