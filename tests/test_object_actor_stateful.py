"""Stateful test of one object actor (a Pod) against the reference model of
:mod:`tests.reference_model`.

The test plays everyone around the actor. It is the *executor*: it collects the actor's
``Ready``, grants a token (``Grant``), takes the ``Job`` (or ``Refund``) and answers ``Done`` —
after sending the call for real (``call.send``) to an :class:`InMemoryApiServer` holding the pod,
or with an injected retryable error (delay 0), conflict (with the fresh pod), permanent error, or
after someone deleted the pod. It is the *server* (the kubelet updates an unrelated condition,
someone deletes the pod), the *informer* (server changes reach the actor in order, but only when
the informer rule runs, so the actor's view lags) and the *scheduler* (status patches — new ones
and re-sent earlier ones —, bindings and preemptions built from its informer cache, and caller
cancellations). Every step ends with a ``View`` ask, so the actor has handled everything sent to
it: no sleeps.

Checked after every step: the outcomes the step produced follow the model's rules; the open
futures are exactly the model's pending and in-flight calls (never two in flight, nothing sent
after the deletion was handled); no future was resolved twice and no actor crashed; the executor
holds a ``Ready`` whenever a call waits with nothing in flight (no lost wake-up); ``View`` shows
the pending and in-flight mutations. At the end the test drains (grant and send until nothing is
left) and checks that every future resolved exactly once and that the server's pod equals the
model's expected final state.

A product bug found here gets a named guard in :data:`GUARDS` (the machine steers around it) and
a minimal ``xfail(strict=True)`` test until it is fixed; none is open.
"""

from __future__ import annotations

import copy
import functools
import queue
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, ParamSpec, TypeVar, cast

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)
from pykka import ActorDeadError, ActorRef

from kdispatch.actors.calls import UNSET, Call
from kdispatch.actors.config import RetryConfig
from kdispatch.actors.errors import (
    CallCancelled,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    Outcome,
    ServerError,
)
from kdispatch.actors.messages import (
    CallFuture,
    Cancel,
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
from kdispatch.actors.objects import POD, Obj, is_newer, pod_node_name
from kdispatch.actors.pod_calls import PodBinding, PodPreemption, PodStatusPatch
from kdispatch.actors.registry import Registry
from kdispatch.actors.runtime import ActorPool
from kdispatch.adapters.memory import InMemoryApiServer, WatchEvent
from tests.factories import cond, pod
from tests.reference_model import (
    BINDING,
    PATCH,
    PREEMPTION,
    Fields,
    Intent,
    Model,
    call_fields,
    differences,
    pod_fields,
)

pytestmark = pytest.mark.timeout(120)

NOW = 100.0  # the executor clock; never advances (every retry delay is 0)
MAX_ATTEMPTS = 3
NODES = ("n1", "n2")
NAME, NAMESPACE = "p", "default"

GUARDS: frozenset[str] = frozenset()
"""Scenarios of known bugs the machine steers around (none open). Two were found and fixed:
``noop-while-in-flight`` (a pending patch dropped as a no-op although the same-type patch in
flight would change its field) and ``stale-after-binding`` (an informer event older than a
successful binding replacing the actor's view); their regression tests are at the end."""

P = ParamSpec("P")
R = TypeVar("R")


def _clock() -> float:
    return NOW


class CountingFuture(CallFuture):
    """A call future that counts how often it was resolved (a second time raises, as usual)."""

    def __init__(self) -> None:
        super().__init__()
        self.resolutions = 0

    def set_result(self, result: Outcome) -> None:
        self.resolutions += 1
        super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        self.resolutions += 1
        super().set_exception(exception)


def resolutions(intent: Intent) -> int:
    """How often the intent's future was resolved."""
    assert isinstance(intent.future, CountingFuture)
    return intent.future.resolutions


class World:
    """The object-actor side of one dispatcher, with the test as its executor. Test thread."""

    def __init__(self, retry: RetryConfig) -> None:
        self.pool = ActorPool(workers=2)
        self.pool.start()
        self.registry = Registry(idle_timeout=None, clock=_clock)
        self.metrics = Metrics()
        self.readies: queue.SimpleQueue[Ready] = queue.SimpleQueue()
        self.answers: queue.SimpleQueue[Job | Refund] = queue.SimpleQueue()
        self.refs: list[ActorRef[Any]] = []
        self.ctx = ActorContext(
            registry=self.registry,
            executor=self._executor,
            metrics=self.metrics,
            retry=retry,
            clock=_clock,
            on_resolved=lambda: None,
            spawn=self._spawn,
        )

    def _executor(self, msg: Ready | Job | Refund) -> None:
        """Pool thread: what the actor tells the executor."""
        if isinstance(msg, Ready):
            self.readies.put(msg)
        else:
            self.answers.put(msg)

    def _spawn(self, uid: str) -> ActorRef[Any]:
        ref = ObjectActor.start(uid, self.ctx, pool=self.pool)
        self.refs.append(ref)
        return ref

    def submit(self, call: Call, future: CallFuture) -> None:
        """Like ``Dispatcher.submit``: route to the object's actor (spawned on demand)."""
        uid = call.ref.uid
        future.set_running_or_notify_cancel()
        if not self.registry.tell(uid, Submit(call, future), lambda: self._spawn(uid)):
            future.set_exception(CallCancelled("object deleted", uid=uid, call_type=call.call_type))

    def tell(self, uid: str, message: object) -> None:
        """Like the informer callbacks and ``Dispatcher.cancel``: never spawns."""
        self.registry.tell(uid, message)

    def delete(self, obj: Obj) -> None:
        """Like ``Dispatcher.on_delete``."""
        uid = obj["metadata"]["uid"]
        if not self.registry.tell(uid, Deleted(obj)):
            self.registry.tombstone(uid)

    def grant(self, ref: ActorRef[Any]) -> Job | None:
        """Reserve a token for the actor; its Job, or None if it refunded."""
        try:
            ref.tell(Grant(NOW))
        except ActorDeadError:
            return None
        self.sync()
        answer = self.answers.get(timeout=5)
        assert self.answers.empty(), "two answers to one grant"
        return answer if isinstance(answer, Job) else None

    def take(self) -> Job:
        """Grant a token to the current actor and return its Job (minimal tests)."""
        job = self.grant(self.refs[-1])
        assert job is not None, "the actor refunded the grant"
        return job

    def done(self, job: Job, done: Done) -> None:
        """The executor's worker reports the attempt's result."""
        job.ref.tell(done)

    def sync(self) -> Obj | None:
        """Wait until the actor handled everything told so far; its view (None if stopped)."""
        if not self.refs:
            return None
        try:
            view = self.refs[-1].ask(View(), timeout=5)
        except ActorDeadError:
            return None
        return cast("Obj | None", view)

    def take_readies(self) -> list[Ready]:
        out = []
        while not self.readies.empty():
            out.append(self.readies.get_nowait())
        return out

    def close(self) -> None:
        self.registry.stop_all(timeout=5)
        self.pool.stop(timeout=5)


# --------------------------------------------------------------------------- strategies

# Few distinct values, so that merges, no-ops and overwrites collide often.
_CONDITION = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("PodScheduled"),
            "status": st.just("False"),
            "reason": st.sampled_from(["Unschedulable", "SchedulerError"]),
        },
        optional={"message": st.just("0/2 nodes are available")},
    ),
    st.fixed_dictionaries(
        {"type": st.just("QueueGate"), "status": st.sampled_from(["True", "False"])},
    ),
)
CONDITIONS = st.lists(_CONDITION, max_size=2, unique_by=lambda c: c["type"])
NOMINATION = st.sampled_from([UNSET, None, *NODES])
WORKER_FAILURES = st.sampled_from(["retryable", "conflict", "permanent", "pod_deleted"])
KILL_AFTER = 4
"""Preemptions and deletions only come once this many calls were submitted: an early kill
would cancel everything and leave the rest of the example with nothing to explore."""


class PatchSpec(NamedTuple):
    """What a status patch sets (kept in a bundle, so that it can be sent again later)."""

    conditions: tuple[dict[str, str], ...]
    nnn: Any


def step(fn: Callable[P, R]) -> Callable[P, R]:
    """Count a rule or invariant as unfinished while it runs: if it raised, :meth:`teardown`
    only cleans up (its final checks would just report the same failure again)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        machine = args[0]
        assert isinstance(machine, ObjectActorMachine)
        machine.unfinished += 1
        result = fn(*args, **kwargs)
        machine.unfinished -= 1
        return result

    return wrapper


class ObjectActorMachine(RuleBasedStateMachine):
    """One pod, its actor, the in-memory apiserver, a lagging informer, and the model."""

    def __init__(self) -> None:
        super().__init__()
        self.unfinished = 0  # rules and invariants that started and did not return
        self.server = InMemoryApiServer()
        created = self.server.create(pod(NAME, namespace=NAMESPACE))
        self.uid: str = created["metadata"]["uid"]
        self.watch = self.server.watch(POD)
        self.events: deque[WatchEvent] = deque()  # server changes the informer has not delivered
        self.cache: Obj = created  # the scheduler's informer cache: basis of its calls
        self.actor_obj: Obj | None = None  # the actor's observed object, as far as we can tell
        retry = RetryConfig(
            max_attempts=MAX_ATTEMPTS, max_conflict_retries=1000, base_backoff=0, max_backoff=0
        )
        self.world = World(retry)
        self.model = Model(created, MAX_ATTEMPTS)
        self.ready_ref: ActorRef[Any] | None = None  # the executor's queue entry for the pod
        self.job: Job | None = None  # the attempt in flight
        self.view: Obj | None = None

    # ------------------------------------------------------------------ plumbing

    def server_pod(self) -> Obj | None:
        return self.server.get_object(POD, NAMESPACE, NAME)

    def _hand(self, obj: Obj | None) -> None:
        """``obj`` reached the actor: track its observed object as the actor does."""
        if obj is not None and self.world.refs and is_newer(obj, self.actor_obj, strict=True):
            self.actor_obj = obj

    def _settle(self) -> dict[Intent, str]:
        """End of a step: wait for the actor, collect the executor's mail and the server's
        events, and return the futures resolved during the step."""
        self.view = self.world.sync()
        for ready in self.world.take_readies():
            assert ready.not_before <= NOW
            self.ready_ref = ready.ref
        while (event := self.watch.next(timeout=0)) is not None:
            self.events.append(event)
        return self.model.newly_resolved()

    def _submit(self, call: Call) -> None:
        future = CountingFuture()
        intent = self.model.new_intent(call, future)
        self.world.submit(call, future)
        self._hand(call.basis)
        self.model.on_submit(intent, self._settle(), self.server_pod())

    def _done(self, job: Job, done: Done) -> None:
        self.job = None
        self.world.done(job, done)
        if done.result in (Result.SUCCESS, Result.CONFLICT):
            self._hand(done.obj)
        if done.result is Result.SUCCESS and done.obj is None and self.actor_obj is not None:
            self.actor_obj = job.call.apply(self.actor_obj)  # a binding: no reply object
        self.model.on_done(done.result.value, job.attempt, self._settle(), self.server_pod())

    def _send(self, job: Job) -> Done:
        """Send the job to the server and classify the result, as an executor worker does."""
        call = job.call
        try:
            return Done(call, Result.SUCCESS, call.send(self.server, job.obj))
        except NotFoundError as exc:
            return Done(call, Result.NOT_FOUND, error=exc)
        except ConflictError as exc:
            fresh = self.server_pod()
            if fresh is None:
                return Done(call, Result.NOT_FOUND, error=exc)
            return Done(call, Result.CONFLICT, fresh, exc)

    def _elided_despite_inflight(self, fields: Fields, obj: Obj | None) -> bool:
        """Guard helper: whether a status patch setting ``fields`` is a no-op on ``obj`` though
        the call in flight will change one of them."""
        return (
            obj is not None and not differences(fields, obj) and bool(self.model.clobbered(fields))
        )

    # ------------------------------------------------------------------ the scheduler

    patches = Bundle("patches")

    @rule(target=patches, conditions=CONDITIONS, nnn=NOMINATION)
    @step
    def submit_status_patch(self, conditions: list[dict[str, str]], nnn: Any) -> PatchSpec:
        if not conditions and nnn is UNSET:
            conditions = [cond()]  # a patch must change something
        spec = PatchSpec(tuple(conditions), nnn)
        self.resubmit_status_patch(spec)
        return spec

    @rule(spec=patches)
    @step
    def resubmit_status_patch(self, spec: PatchSpec) -> None:
        """The scheduler sends an earlier intent again (a pod failing one cycle after another,
        a nomination set, cleared and set again)."""
        call = PodStatusPatch.for_pod(
            self.cache, conditions=spec.conditions, nominated_node_name=spec.nnn
        )
        pending = self.model.pending
        if "noop-while-in-flight" in GUARDS and pending is not None and pending.call_type == PATCH:
            merged = {**pending.merged, **call_fields(call)}
            if any(
                self._elided_despite_inflight(merged, obj)
                for obj in (self.cache, self.actor_obj, self.server_pod())
            ):
                return  # skipped: see GUARDS
        self._submit(call)

    @rule(node=st.sampled_from(NODES))
    @step
    def submit_binding(self, node: str) -> None:
        self._submit(PodBinding.for_pod(self.cache, node))

    @precondition(lambda self: len(self.model.intents) >= KILL_AFTER)
    @rule(preemptor=st.sampled_from([None, "default/high"]), grace=st.sampled_from([None, 0]))
    @step
    def submit_preemption(self, preemptor: str | None, grace: int | None) -> None:
        self._submit(
            PodPreemption.for_pod(self.cache, preemptor=preemptor, grace_period_seconds=grace)
        )

    @precondition(lambda self: self.model.pending is not None)
    @rule(call_type=st.sampled_from([None, PATCH, BINDING, PREEMPTION]))
    @step
    def caller_cancels(self, call_type: str | None) -> None:
        self.world.tell(self.uid, Cancel(call_type))
        self.model.on_cancel(call_type, self._settle())

    # ------------------------------------------------------------------ the server and informer

    @precondition(lambda self: self.server_pod() is not None)
    @rule(status=st.sampled_from(["True", "False"]))
    @step
    def kubelet_updates(self, status: str) -> None:
        """The kubelet sets the pod's Ready condition (a field our calls never touch)."""
        current = self.server_pod()
        assert current is not None
        obj = copy.deepcopy(dict(current))
        del obj["metadata"]["resourceVersion"]
        conditions = [c for c in obj["status"]["conditions"] if c["type"] != "Ready"]
        obj["status"]["conditions"] = [*conditions, {"type": "Ready", "status": status}]
        self.server.update(obj)
        self.model.kubelet["Ready.status"] = status
        self._settle()

    @precondition(
        lambda self: self.server_pod() is not None and len(self.model.intents) >= KILL_AFTER
    )
    @rule()
    @step
    def someone_deletes_the_pod(self) -> None:
        self.server.remove(POD, NAMESPACE, NAME)
        self.model.deleted = True
        self._settle()

    @precondition(
        lambda self: (
            self.events
            and not (
                "noop-while-in-flight" in GUARDS
                and self.events[0].type != "DELETED"
                and self.model.pending is not None
                and self.model.pending.call_type == PATCH
                and self._elided_despite_inflight(self.model.pending.merged, self.events[0].object)
            )
        )
    )
    @rule()
    @step
    def informer_delivers(self) -> None:
        """The next server change reaches the scheduler's cache and the actor."""
        event = self.events.popleft()
        if (
            "stale-after-binding" in GUARDS
            and event.type != "DELETED"
            and pod_node_name(self.actor_obj) is not None
            and pod_node_name(event.object) is None
        ):
            return  # skipped: see GUARDS
        self.cache = event.object
        if event.type == "DELETED":
            self.world.delete(event.object)
            self.model.on_deleted(self._settle())
        else:
            self.world.tell(self.uid, Observed(event.object))
            self._hand(event.object)
            self.model.on_observed(self._settle(), self.server_pod())

    # ------------------------------------------------------------------ the executor

    @precondition(lambda self: self.ready_ref is not None)
    @rule()
    @step
    def executor_grants(self) -> None:
        ref, self.ready_ref = self.ready_ref, None
        assert ref is not None
        job = self.world.grant(ref)
        if job is not None:
            assert self.job is None, "two calls in flight"
            assert job.attempt >= 1
            self.job = job
        self.model.on_grant(job.call if job else None, self._settle(), self.server_pod())

    @precondition(lambda self: self.job is not None)
    @rule()
    @step
    def worker_sends(self) -> None:
        assert self.job is not None
        self._done(self.job, self._send(self.job))

    @precondition(lambda self: self.job is not None)
    @rule(failure=WORKER_FAILURES)
    @step
    def worker_fails(self, failure: str) -> None:
        """The attempt fails: a retryable error (delay 0), a conflict (with the fresh pod), a
        permanent error, or the pod was deleted just before the request reached the server."""
        job = self.job
        assert job is not None
        fresh = self.server_pod()
        if failure == "retryable":
            self._done(job, Done(job.call, Result.RETRY, error=ServerError("boom")))
        elif failure == "conflict" and fresh is not None:
            self._done(job, Done(job.call, Result.CONFLICT, fresh, ConflictError()))
        elif failure == "permanent":
            self._done(job, Done(job.call, Result.FAILED, error=InvalidRequestError()))
        else:
            if fresh is not None:
                self.server.remove(POD, NAMESPACE, NAME)
                self.model.deleted = True
            self._done(job, self._send(job))

    # ------------------------------------------------------------------ invariants

    @invariant()
    @step
    def check(self) -> None:
        """Resolutions, crashes, slots, wake-ups and read-your-writes, after every step."""
        for intent in self.model.intents:
            assert resolutions(intent) <= 1, f"{intent} resolved twice"
        assert self.world.metrics.value("kdispatch_object_actor_failures_total") == 0
        open_futures = {i for i in self.model.intents if not i.future.done()}
        assert open_futures == self.model.unresolved(), (
            f"open futures {open_futures} != pending/in flight {self.model.unresolved()}"
        )
        assert (self.job is None) == (self.model.inflight is None)
        if self.model.pending is not None and self.job is None:
            assert self.ready_ref is not None, "a call is pending but the executor was not told"
        if self.view is not None and not self.model.gone:
            diff = differences(self.model.expected_view(), self.view)
            assert not diff, f"the view lacks pending/in-flight mutations: {diff} (want, have)"

    # ------------------------------------------------------------------ end

    def _drain(self) -> None:
        for _ in range(100):
            if self.job is not None:
                self.worker_sends()
            elif self.ready_ref is not None:
                self.executor_grants()
            else:
                return
            self.check()
        raise AssertionError("the calls did not drain")

    def teardown(self) -> None:
        try:
            if self.unfinished:
                return  # a step failed: that failure is the report
            self._drain()
            for intent in self.model.intents:
                assert resolutions(intent) == 1, f"{intent} resolved {resolutions(intent)} times"
            want, have = self.model.expected_pod(), self.server_pod()
            if want is None or have is None:
                assert want is None and have is None, f"pod should be {want}, server has {have}"
            else:
                assert pod_fields(have) == want, (
                    f"server pod differs from the model: {differences(want, have)} (want, have)"
                )
        finally:
            self.watch.stop()
            self.world.close()


ObjectActorMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestObjectActorStateful = ObjectActorMachine.TestCase


# --------------------------------------------------------------------------- known bugs


@pytest.fixture
def world() -> Iterator[World]:
    w = World(RetryConfig(max_attempts=3))
    yield w
    w.close()


def _submit(world: World, call: Call) -> CountingFuture:
    future = CountingFuture()
    world.submit(call, future)
    world.sync()
    return future


def test_informer_update_keeps_a_pending_patch_the_in_flight_patch_would_undo(
    world: World,
) -> None:
    """Nominate n1, then clear the nomination while n1 is in flight: an unrelated update must
    not drop the clear, or the pod stays nominated to n1."""
    p = pod("a")  # not nominated
    _submit(world, PodStatusPatch.for_pod(p, nominated_node_name="n1"))
    job = world.take()  # nominate n1: in flight
    clear = _submit(world, PodStatusPatch.for_pod(p, nominated_node_name=None))
    assert not clear.done()  # kept: a no-op now, but not once the nomination lands
    # the kubelet changes something else; the informer delivers it
    world.tell("uid-a", Observed(pod("a", rv=2, conditions=(cond("Ready", "True", ""),))))
    world.sync()
    assert not clear.done(), f"the clear resolved {clear.result()}: the pod stays nominated"
    world.done(job, Done(job.call, Result.SUCCESS, pod("a", rv=3, nnn="n1")))
    world.sync()
    assert world.take().call == PodStatusPatch.for_pod(p, nominated_node_name=None)


def test_merge_keeps_a_pending_patch_the_in_flight_patch_would_undo(world: World) -> None:
    """Same as above, when the clear is sent twice: the merge must not be elided either."""
    p = pod("a")  # not nominated
    _submit(world, PodStatusPatch.for_pod(p, nominated_node_name="n1"))
    world.take()  # nominate n1: in flight
    first = _submit(world, PodStatusPatch.for_pod(p, nominated_node_name=None))
    again = _submit(world, PodStatusPatch.for_pod(p, nominated_node_name=None))
    assert first.result(timeout=5) is Outcome.OVERWRITTEN
    assert not again.done(), f"the clear resolved {again.result()}: the pod stays nominated"


def test_informer_event_older_than_a_successful_binding_does_not_undo_it(world: World) -> None:
    """A lagging informer event from before the binding must neither hide the binding from
    ``View`` nor let a later ``PodScheduled=False`` patch be skipped while the server has
    ``PodScheduled=True``."""
    unschedulable = cond()  # PodScheduled=False, Unschedulable
    p = pod("a", rv=2, conditions=(unschedulable,))
    _submit(world, PodBinding.for_pod(p, "n1"))
    job = world.take()
    world.done(job, Done(job.call, Result.SUCCESS))  # a binding's reply carries no pod
    # server: rv 3 = a kubelet update, rv 4 = the binding; the informer is at rv 3
    kubelet = pod("a", rv=3, conditions=(unschedulable, cond("Ready", "True", "")))
    world.tell("uid-a", Observed(kubelet))
    view = world.sync()
    assert view is not None and pod_node_name(view) == "n1", "read-your-writes lost the binding"
    again = _submit(world, PodStatusPatch.for_pod(p, conditions=[unschedulable]))
    assert not again.done(), "skipped as a no-op, but the server has PodScheduled=True"
