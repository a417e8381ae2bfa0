"""The public facade: ``Dispatcher``.

A scheduler (or any controller) submits calls and gets a future back in microseconds; informer
callbacks feed the newest objects in; everything else happens on the actor pool and the
executor's workers. Thread-safety: every public method may be called from any thread. Methods
that only ``tell`` (``submit``, ``on_*``, ``cancel``, ``preempt``) never block on the apiserver;
``view`` blocks for one round trip to the object's actor; ``stop`` blocks until its deadline.
``asubmit`` and ``aview`` are their asyncio forms (:mod:`kdispatch.actors.engine.aio`):
awaited on the caller's loop, they never block it.

Calls may depend on calls on other objects: ``submit(call, after=(future, ...))`` admits the
call at once but sends it only once every prerequisite succeeded
(:mod:`kdispatch.actors.engine.holds`), and ``group(owner=obj)`` gathers steps that die with
their owner (:mod:`kdispatch.actors.engine.groups`).
Both live in memory: a restarted process or a new leader rebuilds from the apiserver.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import Future
from functools import partial
from typing import Any, Final, Self, overload

import pykka
from loguru import logger
from prometheus_client import CollectorRegistry

from kdispatch.actors.engine.aio import await_future, check_timeout, running_loop, wrap_call_future
from kdispatch.actors.engine.executor import Executor
from kdispatch.actors.engine.gangs import Gang, check_min_count
from kdispatch.actors.engine.groups import CallGroup, OwnerIndex
from kdispatch.actors.engine.holds import (
    ASYNC_SOURCE,
    Dependencies,
    Hold,
    Prerequisite,
    dependency_failed,
)
from kdispatch.actors.engine.housekeeper import Housekeeper
from kdispatch.actors.engine.messages import (
    CallFuture,
    Cancel,
    Deleted,
    Observed,
    Revoke,
    Submit,
    View,
    Withdraw,
    settle,
)
from kdispatch.actors.engine.metrics import Metrics
from kdispatch.actors.engine.object_actor import ActorContext, ObjectActor
from kdispatch.actors.engine.registry import Registry
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.call_types import default_call_types
from kdispatch.actors.model.calls import Call, CallTypeRegistry, plain_basis
from kdispatch.actors.model.config import DispatcherConfig
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallFailed,
    DispatcherClosed,
    InvalidInputError,
    Outcome,
)
from kdispatch.actors.model.objects import Obj, ObjectRef, as_object, check_uid
from kdispatch.actors.model.queue_policy import NO_HOLDS
from kdispatch.actors.runtime.gctuning import GcTuner, collections_paused
from kdispatch.actors.runtime.pool import ActorPool

from .dispatcher_like import Backlog, DispatcherLike, lane_level

_new: Final = tuple.__new__
_STOP_GRACE = 0.25  # seconds stop() gives its threads after the drain deadline
_TURN_GRACE = 0.1  # at least this for the actor pool's workers to finish their turn
_GROUP_LOCK_STRIPES = 64  # locks shared by the call groups (see Dispatcher.group)


class Dispatcher(DispatcherLike):
    """Non-blocking, merged, rate-limited API calls; one actor per object UID.

    Typical use::

        dispatcher = Dispatcher(backend).start()
        future = dispatcher.submit(PodBinding.for_pod(pod, "node-1"))
        ...
        dispatcher.stop(drain=True, timeout=10)
    """

    def __init__(
        self,
        backend: ApiBackend,
        config: DispatcherConfig | None = None,
        *,
        call_types: CallTypeRegistry | None = None,
        metrics_registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        send_gate: Callable[[], bool] | None = None,
    ) -> None:
        if not isinstance(backend, ApiBackend):
            raise InvalidInputError(
                f"backend must implement ApiBackend, got {type(backend).__name__}"
            )
        if config is None:
            config = DispatcherConfig()
        if not isinstance(config, DispatcherConfig):
            raise InvalidInputError(
                f"config must be a DispatcherConfig, got {type(config).__name__}"
            )
        if call_types is not None and not isinstance(call_types, CallTypeRegistry):
            raise InvalidInputError("call_types must be a CallTypeRegistry")
        if send_gate is not None and not callable(send_gate):
            raise InvalidInputError("send_gate must be a callable returning bool, or None")
        self.config = config
        size_pool = getattr(backend, "size_pool", None)
        if callable(size_pool):  # e.g. KubernetesBackend: a connection per executor worker
            size_pool(config.executor.workers)
        self.call_types = call_types if call_types is not None else default_call_types()
        self.metrics = Metrics(metrics_registry, prefix=config.metrics_prefix)
        self._clock = clock
        # RegistryConfig's fields are the Registry's parameters, by name
        self._registry = Registry(**dataclasses.asdict(config.registry), clock=clock)
        self.metrics.bind_live(self._registry.live_count, lambda: self._registry.dropped)
        self._pool = ActorPool(workers=config.runtime.workers, batch=config.runtime.batch)
        self._executor = Executor(
            backend,
            relevances=self.call_types.relevances(),
            rate_limit=config.rate_limit,
            retry=config.retry,
            config=config.executor,
            metrics=self.metrics,
            clock=clock,
            send_gate=send_gate,
            log_calls=config.log_calls,
        )
        self._ctx = ActorContext(
            registry=self._registry,
            executor=self._executor,
            metrics=self.metrics,
            retry=config.retry,
            pool=self._pool,
            clock=clock,
            on_resolved=self._on_resolved,
            log_calls=config.log_calls,
        )
        self._spawn = partial(ObjectActor, ctx=self._ctx)  # a C call per spawn, no frame
        self._state_lock = threading.Condition(threading.Lock())
        # The futures not resolved yet, counted per lane: one deque entry each. ``append`` and
        # ``pop`` are atomic under the interpreter lock (see :mod:`kdispatch.actors`), so the
        # submitting threads and the actors resolving futures share no lock (``submit`` never
        # waits behind an actor). Also wait_backlog's waiters.
        self._backlog = Backlog()
        self._drain_waiters = 0  # stop() calls waiting for the last future (under the lock)
        self._started = False
        self._closed = False
        self._revoked: DispatcherClosed | None = None
        self._open = False  # started, not closed, not revoked: what submit checks (one read)
        self._housekeeper: pykka.ActorRef[Housekeeper] | None = None
        self._winding_down = threading.Event()  # set to end the housekeeper's wait
        self._gc = GcTuner(config.runtime)
        self._abandoned: list[tuple[Any, list[Any]]] = []  # actors stop() settled in bulk
        self._deps = Dependencies(self, self._registry.tell, self.metrics)
        # Call groups by owner UID, read without a lock by on_delete and by the submit of an
        # exclusive call (one dict lookup).
        self._owners = OwnerIndex()
        # A group's own fields (CallGroup) are guarded by one of these, picked by its owner's
        # UID. A lock per group costs ~70 B; one lock for all made a submitting thread wait
        # for the pool's workers resolving other groups' steps (p99 12 times longer at 10k).
        self._group_locks = tuple(threading.Lock() for _ in range(_GROUP_LOCK_STRIPES))

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Caller thread. Start the actor pool, the executor and the idle reaper. Raises
        :class:`~kdispatch.InvalidInputError` if already started, or once
        stopped (a stopped dispatcher cannot be restarted: create a new one)."""
        with self._state_lock:
            if self._closed:
                raise InvalidInputError("dispatcher stopped: create a new Dispatcher")
            if self._started:
                raise InvalidInputError("dispatcher already started")
            self._started = True
            self._open = True
        self._pool.start()
        self._executor.start()
        self._housekeeper = Housekeeper.start(
            self._registry, self.config.reap_interval, self._winding_down
        )
        self._gc.start()
        return self

    def freeze_gc(self) -> None:
        """Any thread. Take every object alive now out of the cyclic collector's scans: collect
        the young generations, then ``gc.freeze()`` (process-wide). Call it after warm-up (the
        informers synced, the first wave of calls submitted); ``RuntimeConfig.gc_freeze`` does it
        at start and then periodically. ``stop()`` unfreezes."""
        self._gc.freeze()

    def __enter__(self) -> Self:
        return self.start() if not self._started else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, drain: bool = True, timeout: float = 30.0) -> bool:
        """Caller thread. Stop intake; with ``drain``, let pending calls finish until
        ``timeout``; then resolve everything left with :class:`DispatcherClosed`, stop this
        dispatcher's actors and threads (never pykka's global ``stop_all``). Returns True if
        every call finished before the deadline. Idempotent.

        Returns within ``timeout`` + about 0.5 s whatever the backlog: the phases after the
        drain (the executor's threads, the actor pool) share one short grace period, and what
        is left is settled in bulk on this thread, never one actor turn at a time. A request
        already on the wire when the grace period ends is not waited for: its future resolves
        :class:`DispatcherClosed` (whether it landed is unknown, as for any lost reply) and its
        worker thread ends when the request returns."""
        deadline = time.monotonic() + timeout
        with self._state_lock:
            if self._closed:
                return not self._backlog.outstanding
            self._closed = True
            self._open = False
            self._ctx.closing = not drain
            # without drain, a call still unresolved now is closed, not finished (the actors
            # start resolving them DispatcherClosed at once)
            idle = not self._backlog.outstanding
        self._seal_groups()  # no more steps: each group resolves with its last step
        with self._state_lock:
            if drain and self._started:
                self._drain_waiters += 1
                try:
                    while self._backlog.outstanding:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self._state_lock.wait(left)
                finally:
                    self._drain_waiters -= 1
            drained = not self._backlog.outstanding if drain else idle
            self._ctx.closing = True
        # One deadline for every phase from here on.
        end = max(deadline, time.monotonic()) + _STOP_GRACE
        self._stop_housekeeper(end)
        # No request starts any more; the executor's threads end (a request on the wire ends
        # first, until the grace period is over), and with them the actor turns they run.
        self._executor.stop(timeout=max(0.0, end - time.monotonic()))
        with collections_paused():
            # a turn in progress ends within a batch of messages: give it a moment even when
            # the executor used up the grace period
            stuck = self._pool.stop(timeout=max(_TURN_GRACE, end - time.monotonic()))
            if stuck:
                logger.warning("actor pool workers still in a turn after stop: {}", stuck)
            abandoned = self._registry.abandon_all()
            closed = self._settle(abandoned)
            # Freeing 100,000 actors' objects takes longer than settling them: they go with
            # this Dispatcher object instead of inside stop()'s promise.
            self._abandoned = abandoned
        self.metrics.release()  # the registry may now take another dispatcher's metrics
        self._gc.stop()
        if closed:
            logger.debug("{} calls left at the deadline resolved DispatcherClosed", closed)
        logger.debug("dispatcher stopped (drained={})", drained)
        return drained

    def _settle(self, left: list[tuple[Any, list[Any]]]) -> int:
        """Stopping thread, once no actor turn runs: resolve every future the abandoned actors
        still held (their open calls, and the submissions still in their inboxes) with
        :class:`DispatcherClosed`, and count them in bulk. Returns how many. A future resolved
        meanwhile (by a turn on a thread that outlived the grace period) keeps its answer:
        exactly once."""
        closed: dict[str, int] = {}
        for actor, tells in left:
            open_calls: dict[CallFuture, Call] | None = getattr(actor, "open", None)
            if open_calls:
                for future, call in open_calls.items():
                    if _close_future(future):
                        future.lane.pop()  # type: ignore[union-attr]  # set at submit
                        closed[call.call_type] = closed.get(call.call_type, 0) + 1
                open_calls.clear()
            for message in tells:
                if type(message) is Submit and _close_future(message.future):
                    message.future.lane.pop()  # type: ignore[union-attr]
                    call_type = message.call.call_type
                    closed[call_type] = closed.get(call_type, 0) + 1
        total = 0
        for call_type, count in closed.items():
            self.metrics.outcome(call_type, "closed", count)
            total += count
        if self._backlog.waiters:
            self._backlog.wake()
        return total

    # ------------------------------------------------------------------ calls

    def submit(self, call: Call, *, after: Iterable[object] = ()) -> CallFuture:
        """Any thread; never blocks on the apiserver. Validate ``call`` and hand it to its
        object's actor. Raises :class:`~kdispatch.InvalidInputError` subclasses for
        bad calls and :class:`DispatcherClosed` once ``stop`` was called.

        ``after``: futures this dispatcher returned (``submit``, ``asubmit``, ``preempt``, a
        group's steps) or a group's ``future``. The call is admitted at once (merge,
        supersession, staleness as usual) but nothing of it is sent before every prerequisite
        resolved as a success (``SUCCESS``, ``SKIPPED``, ``OVERWRITTEN``); if one fails or is
        cancelled, the call resolves :class:`~kdispatch.DependencyFailed` (a
        ``CallCancelled`` whose ``cause`` is the prerequisite's error) and is never sent. While
        held, it takes no rate-limiter token, no worker and no lane; the calls queued behind
        it on its own object wait for it. Raises
        :class:`~kdispatch.InvalidPrerequisiteError` for anything else in
        ``after`` and :class:`~kdispatch.DependencyCycleError` for a call that
        would wait for itself."""
        self.call_types.check(call)
        basis = call.basis
        if basis is not None and type(basis) is not dict:  # most bases are dicts already
            call = plain_basis(call)
        prereqs = self._deps.prerequisites(after) if after else ()
        return self._admit(call, prereqs, None)

    def asubmit(self, call: Call, *, after: Iterable[object] = ()) -> asyncio.Future[Outcome]:
        """Event-loop thread; never blocks it. ``await dispatcher.asubmit(call)`` gives the
        call's :class:`Outcome` or raises what ``submit(call).result()`` would.

        The call is submitted when ``asubmit`` is called (not when the result is awaited), and
        bad input raises here, as from :meth:`submit` (outside a running loop:
        :class:`~kdispatch.NoEventLoopError`). The result is an ``asyncio.Future``
        on the running loop: await it, ``gather`` it, ``ensure_future`` it, or give it in
        another call's ``after=``. Cancelling it, or the task awaiting it, does not withdraw
        the call: the call's own future still resolves exactly once. Withdraw a pending call
        with :meth:`cancel`."""
        loop = running_loop("asubmit()")
        future = self.submit(call, after=after)
        wrapped = wrap_call_future(future, loop)
        setattr(wrapped, ASYNC_SOURCE, future)
        return wrapped

    @overload
    def group(self, owner: object, *, kind: str | None = None, gang: None = None) -> CallGroup: ...

    @overload
    def group(self, owner: object, *, kind: str | None = None, gang: int) -> Gang: ...

    @overload
    def group(
        self, owner: object, *, kind: str | None = None, gang: int | None = None
    ) -> CallGroup: ...

    def group(
        self, owner: object, *, kind: str | None = None, gang: int | None = None
    ) -> CallGroup:
        """Any thread. A :class:`~kdispatch.CallGroup` of steps that die with
        ``owner`` (an object: a dict, a ``Mapping``, an official-client model, or an
        :class:`ObjectRef`): its deletion (:meth:`on_delete`, or a 404 on a step on it) or
        its preemption (an exclusive call submitted for it) cancels the group. With
        ``gang=min_count``, a :class:`~kdispatch.Gang`: its pod bindings are held until
        ``min_count`` of them were submitted (or it is sealed), then sent together; a failure
        before that withdraws them all. Raises :class:`DispatcherClosed` once ``stop`` or
        ``revoke`` was called, :class:`InvalidInputError` for a ``gang`` that is not an int
        >= 1."""
        ref = owner if isinstance(owner, ObjectRef) else ObjectRef.of(owner, kind)
        check_uid(ref.uid)
        min_count = None if gang is None else check_min_count(gang)
        if self._revoked is not None:
            raise copy.copy(self._revoked)
        if self._closed or not self._started:
            raise DispatcherClosed(
                "dispatcher is stopped" if self._closed else "dispatcher not started"
            )
        lock = self._group_locks[hash(ref.uid) % _GROUP_LOCK_STRIPES]
        group = (
            CallGroup(self, ref, lock) if min_count is None else Gang(self, ref, lock, min_count)
        )
        self._owners.add(group)
        self.metrics.groups_open_delta(1)
        if self._registry.is_tombstoned(ref.uid):  # deleted already
            group.cancel_for("owner_deleted")
        return group

    def _admit(
        self, call: Call, prereqs: tuple[Prerequisite, ...], group: CallGroup | None
    ) -> CallFuture:
        """Submitting thread: :meth:`submit`'s body, for the dispatcher and its groups."""
        future = CallFuture()
        future.owner = self
        future.call = call
        # Counted before the checks: a stop() that starts now waits for this call (or sees it
        # withdrawn below), with no lock between the submitting threads and the actors.
        lane = self._backlog.lanes.get(call.relevance) or self._backlog.lane(call.relevance)
        lane.append(None)
        future.lane = lane
        if not self._open:
            self._on_resolved(future)
            if self._revoked is not None:
                raise copy.copy(self._revoked)  # a fresh exception (traceback) per caller
            raise DispatcherClosed(
                "dispatcher is stopped" if self._closed else "dispatcher not started"
            )
        uid = call.ref.uid
        message = _new(Submit, (call, future, NO_HOLDS, NO_HOLDS))  # built in C
        hold: Hold | None = None
        # A group's step is registered before it is told (its group learns when it resolves:
        # no done-callback); most groups' futures do not exist, and those need no cycle check.
        if prereqs or (group is not None and not group.add_unwatched_step(future)):
            try:
                held = self._deps.hold(call, future, prereqs, group)
            except BaseException:  # DependencyCycleError: nothing registered
                self._on_resolved(future)
                raise
            if isinstance(held, BaseException):  # a prerequisite failed already
                self._resolve_now(future, call, dependency_failed(call, held))
                return future
            if held is not None:
                hold = held
                message = Submit(call, future, frozenset((hold,)), hold.behind)
        if call.exclusive and self._owners.owns(uid):
            # before the preemption reaches the owner: its groups go first, with this cause
            self._cancel_owned(uid, "owner_preempted", spare=group)
        try:
            routed = self._registry.tell(uid, message, self._spawn)
        except BaseException as exc:  # ActorLimitExceeded, or a spawn that failed: not pending
            if prereqs or group is not None:
                self._deps.discard(future, group)
            if group is not None:
                group._drop_step(future)  # never a step: the submit raises
            settle(future, CallFailed(str(exc), ref=call.ref, call_type=call.call_type, cause=exc))
            self._on_resolved(future)
            raise
        if not routed:  # tombstoned: the object was deleted
            self._resolve_now(
                future,
                call,
                CallCancelled("object deleted", ref=call.ref, call_type=call.call_type),
            )
        if hold is not None:
            self._deps.arm(hold)
        return future

    def _resolve_now(self, future: CallFuture, call: Call, error: CallCancelled) -> None:
        """Submitting thread: resolve a call that never reached its actor."""
        self.metrics.outcome(call.call_type, "cancelled")
        settle(future, error)
        self._on_resolved(future)

    def revoke(self, error: DispatcherClosed) -> None:
        """Any thread; never blocks. Stop intake at once (``submit`` raises ``error`` from now
        on) and resolve every call not yet sent with ``error``, e.g. :class:`LeadershipLost`
        when the leader lease is lost. A request already on the wire finishes and reports as
        usual. Pair it with a ``send_gate`` that has turned False, so nothing else is sent."""
        if not isinstance(error, DispatcherClosed):
            raise InvalidInputError("revoke needs a DispatcherClosed (e.g. LeadershipLost)")
        with self._state_lock:
            if self._revoked is not None:
                return
            self._revoked = error
            self._open = False
        self._seal_groups()
        message = Revoke(error)
        for actor in self._registry.live_actors():
            actor.tell(message)

    @property
    def revoked(self) -> DispatcherClosed | None:
        """The error :meth:`revoke` was called with, or None."""
        return self._revoked

    def cancel(self, uid: str, call_type: str | None = None) -> None:
        """Any thread. Withdraw the object's pending call (of ``call_type``, or any); its future
        resolves :class:`CallCancelled`. A call already in flight cannot be recalled."""
        check_uid(uid)
        if call_type is not None:
            self.call_types.spec(call_type)
        self._registry.tell(uid, Cancel(call_type))

    def view(self, uid: str, timeout: float = 5.0) -> Obj | None:
        """Caller thread (blocks for one actor round trip; never call it from an actor). The
        object as last observed with in-flight and pending mutations applied (read-your-writes),
        or None if the object is not tracked."""
        check_uid(uid)
        reply: Future[Obj | None] = Future()
        actor = self._registry.get(uid)
        if actor is None or not actor.tell(View(reply)):
            return None
        return reply.result(timeout)

    def aview(self, uid: str, timeout: float | None = 5.0) -> Coroutine[Any, Any, Obj | None]:
        """``await dispatcher.aview(uid)``: :meth:`view` for asyncio code. The actor's answer is
        posted to the awaiting loop by the actor's own worker, so the loop is never blocked and
        no thread waits. Bad input raises when ``aview`` is called; :class:`TimeoutError` after
        ``timeout`` seconds; None if the object is not tracked."""
        check_uid(uid)
        seconds = check_timeout(timeout)
        return self._aview(uid, seconds)

    async def _aview(self, uid: str, timeout: float | None) -> Obj | None:
        reply: Future[Obj | None] = Future()
        actor = self._registry.get(uid)
        if actor is None or not actor.tell(View(reply)):
            return None
        return await await_future(reply, timeout)

    # ------------------------------------------------------------------ informer callbacks

    # Objects may be dicts, any Mapping (kopf's Body) or official-client models (V1Pod ...):
    # they are turned into their JSON dict form (objects.as_object) before they go any further.

    def on_add(self, obj: object, kind: str | None = None) -> None:
        """Informer thread (or the event loop); only tells. A tracked object learns its newest
        state."""
        self._observe(obj, kind)

    def on_update(self, obj: object, kind: str | None = None) -> None:
        """Informer thread (or the event loop); only tells. An update for an untracked object
        changes nothing."""
        self._observe(obj, kind)

    def on_delete(self, obj: object, kind: str | None = None) -> None:
        """Informer thread (or the event loop); only tells. Cancels every pending call of the
        object, stops its actor and tombstones the UID so late events cannot resurrect it."""
        plain = as_object(obj)
        ref = ObjectRef.of(plain, kind)
        if not self._registry.tell(ref.uid, Deleted(plain)):
            self._registry.tombstone(ref.uid)
        if self._owners.owns(ref.uid):  # no lock unless it owns a call group
            self._cancel_owned(ref.uid, "owner_deleted")

    def _observe(self, obj: object, kind: str | None) -> None:
        plain = as_object(obj)
        ref = ObjectRef.of(plain, kind)
        self._registry.tell(ref.uid, Observed(plain))

    # ------------------------------------------------------------------ introspection

    @property
    def live_actors(self) -> int:
        """Object actors alive now."""
        return self._registry.live_count()

    @property
    def outstanding(self) -> int:
        """Futures not yet resolved."""
        return self._backlog.outstanding

    @property
    def backlog(self) -> int:
        """Any thread; cheap. Calls submitted and not resolved, Events (best-effort calls) left
        out (see :attr:`DispatcherLike.backlog`); held calls and group steps count."""
        return self._backlog.count(lane_level(self.call_types, None))

    def backlog_at(self, call_type: str | None = None) -> int:
        """Any thread; cheap. Calls not resolved in ``call_type``'s lane and the lanes above
        it (see :meth:`DispatcherLike.backlog_at`)."""
        return self._backlog.count(lane_level(self.call_types, call_type))

    def wait_backlog(
        self, below: int, timeout: float | None = None, *, call_type: str | None = None
    ) -> bool:
        """Calling thread (never an actor's). Block until :meth:`backlog_at` ``(call_type)``
        is below ``below``; False after ``timeout`` seconds. See
        :meth:`DispatcherLike.wait_backlog`."""
        return self._backlog.wait(below, timeout, lane_level(self.call_types, call_type))

    @property
    def tokens_taken(self) -> int:
        """Tokens of the calls' bucket used so far (taken and not refunded; Events with a
        bucket of their own count in ``stats()["event_tokens_taken"]``); cheap, any thread."""
        return self._executor.tokens_taken

    def stats(self) -> dict[str, Any]:
        """Any thread; cheap (reads counters). Figures for reports, every key always present:

        ``sent``
            ``{call_type: n}``: requests sent to the apiserver per call type — every request
            it saw, follow-up GETs after a 409 and re-reads before a retry included.
        ``sent_total``
            The sum of ``sent``; equals ``tokens_taken`` plus ``events["tokens_taken"]``.
        ``outcomes``
            ``{"call_type:outcome": n}``: futures resolved, per call type and outcome
            (``success``, ``skipped``, ``overwritten``, ``cancelled``, ``conflict``,
            ``stale``, ``not_found``, ``failed``, ``closed``).
        ``retries``
            ``{"call_type:reason": n}``: retries scheduled after a retryable failure, per call
            type and reason (``429``, ``5xx``, ``timeout``, ``connection``).
        ``live_actors``
            Object actors alive now (objects with a call pending or in flight, or recently
            so).
        ``events_without_actor``
            Messages that found no actor to route to: mostly informer events for objects
            with no call (normal: only objects with calls are tracked), also cancels for
            untracked UIDs and late messages for deleted (tombstoned) objects.
        ``tokens_taken``
            Tokens of the calls' bucket used (taken and not refunded): one per request sent,
            but the Events' when they have a bucket of their own.
        ``events``
            The Events (best-effort calls): ``tokens_taken``, tokens of their own bucket used
            (``RateLimitConfig.events_qps``; 0 with ``events_shared``); ``waiting``, Event
            objects waiting now for a worker and a token; ``dropped``, ``{reason: n}``,
            Events dropped unsent (``kdispatch_events_dropped_total``): ``queue_full`` when
            ``ExecutorConfig.events_max_pending`` Events already waited, ``throttled`` for a
            follow-up request that found no spare token of a shared bucket.
        ``pid``
            The process the dispatcher runs in (for :class:`ProcessDispatcher`, the child).
        """
        m = self.metrics
        out: dict[str, Any] = {"sent": {}, "outcomes": {}, "retries": {}}
        dropped: dict[str, int] = {}
        for sample in m.samples(m.requests, m.outcomes, m.retries, m.events_dropped):
            if sample.name == "kdispatch_requests_total":
                ct = sample.labels["call_type"]
                out["sent"][ct] = out["sent"].get(ct, 0) + int(sample.value)
            elif sample.name == "kdispatch_call_outcomes_total":
                key = f"{sample.labels['call_type']}:{sample.labels['outcome']}"
                out["outcomes"][key] = int(sample.value)
            elif sample.name == "kdispatch_retries_total":
                key = f"{sample.labels['call_type']}:{sample.labels['reason']}"
                out["retries"][key] = int(sample.value)
            elif sample.name == "kdispatch_events_dropped_total":
                dropped[sample.labels["reason"]] = int(sample.value)
        out["sent_total"] = sum(out["sent"].values())
        out["live_actors"] = self.live_actors
        out["events_without_actor"] = self._registry.dropped
        out["tokens_taken"] = self.tokens_taken
        out["events"] = {
            "tokens_taken": self._executor.event_tokens_taken,
            "waiting": self._executor.events_waiting,
            "dropped": dropped,
        }
        out["pid"] = os.getpid()
        return out

    # ---------------------------------------------------------------- call groups (GroupHost)

    def submit_step(self, call: Call, after: Iterable[object], group: CallGroup) -> CallFuture:
        """Caller thread (``CallGroup.submit``): :meth:`submit` as a step of ``group``."""
        self.call_types.check(call)
        call = plain_basis(call)
        prereqs = self._deps.prerequisites(after) if after else ()
        return self._admit(call, prereqs, group)

    def refuse_step(self, call: Call, group: CallGroup) -> CallFuture:
        """Caller thread: a step of a cancelled group, resolved at once and never sent."""
        self.call_types.check(call)
        future = CallFuture()
        future.owner = self
        future.call = call
        lane = self._backlog.lane(call.relevance)
        lane.append(None)
        future.lane = lane
        group.add_step(future)
        refused = group._refusal(call, held=False)
        assert refused is not None  # a group is never un-cancelled
        self._resolve_now(future, call, refused)
        return future

    def withdraw(self, future: CallFuture, cause: CallCancelled) -> None:
        """Any thread: withdraw one step, by its future (:meth:`.ObjectState.withdraw`). A
        held step fails its hold (it resolves ``DependencyFailed`` with ``cause``); any other
        is withdrawn exactly: pending, it resolves ``CallCancelled``; in flight, it is not
        sent again. A step resolved ``OVERWRITTEN`` is withdrawn from the newer call that
        carries its intent (which is sent anyway while it carries another intent)."""
        call = future.call
        if call is None:
            return
        if future.done():
            if future.exception() is not None or future.result() is not Outcome.OVERWRITTEN:
                return
        elif self._deps.fail(future, cause):
            return
        self._registry.tell(call.ref.uid, Withdraw(future, cause))

    def group_cancelled(self, group: CallGroup, cause: str) -> None:
        """Any thread: ``group`` was cancelled (metrics)."""
        self.metrics.group_cancelled(cause)

    def group_resolved(self, group: CallGroup) -> None:
        """Any thread: ``group``'s future resolved; forget it."""
        if self._owners.remove(group):
            self.metrics.groups_open_delta(-1)

    def _cancel_owned(self, uid: str, cause: str, spare: CallGroup | None = None) -> None:
        """Any thread: cancel the call groups ``uid`` owns (but ``spare``, whose own step
        preempts its owner)."""
        for group in self._owners.of(uid):
            if group is not spare:
                group.cancel_for(cause)

    def _seal_groups(self) -> None:
        """``stop``/``revoke``: no group takes more steps; each resolves with its last step."""
        for group in self._owners.all():
            group._seal(closing=True)

    @property
    def open_groups(self) -> int:
        """Call groups created and not yet resolved. Any thread."""
        return self._owners.count

    @property
    def held_calls(self) -> int:
        """Calls held on prerequisites that have not all resolved. Any thread."""
        return self._deps.held

    # ------------------------------------------------------------------ internals

    def _on_resolved(self, future: CallFuture) -> None:
        """Any thread (an actor resolving ``future``, or ``submit`` withdrawing it)."""
        future.lane.pop()  # type: ignore[union-attr]  # set by _admit before any resolution
        if self._drain_waiters and not self._backlog.outstanding:
            with self._state_lock:
                self._state_lock.notify_all()
        if self._backlog.waiters:  # a thread waits in wait_backlog
            self._backlog.wake()

    def _stop_housekeeper(self, end: float) -> None:
        """Stopping thread: end the housekeeper's wait and stop it, by ``end``."""
        self._winding_down.set()
        ref = self._housekeeper
        if ref is not None:
            try:
                ref.stop(block=True, timeout=max(0.1, end - time.monotonic()))
            except pykka.Timeout:  # a reaping pass over many actors: it ends on its own
                logger.warning("the housekeeper is still reaping at the stop deadline")


def _close_future(future: CallFuture) -> bool:
    """Resolve ``future`` with :class:`DispatcherClosed` unless it is resolved already; True if
    this call resolved it. Any thread."""
    if future.done():
        return False
    # resolved meanwhile by a late turn: that answer stands (False)
    return settle(future, DispatcherClosed("dispatcher stopped before the call completed"))


__all__ = ["CallGroup", "Dispatcher", "Outcome"]
