"""The public facade: ``Dispatcher``.

A scheduler (or any controller) submits calls and gets a future back in microseconds; informer
callbacks feed the newest objects in; everything else happens on the actor pool and the
executor's workers. Every public method may be called from any thread; each says whether it
blocks. Held calls (``after=``) and call groups are :mod:`kdispatch.actors.engine.holds` and
:mod:`kdispatch.actors.engine.groups` (docs/groups.md).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, Self

import pykka
from loguru import logger
from prometheus_client import CollectorRegistry

from kdispatch.actors.engine.aio import await_future
from kdispatch.actors.engine.executor import Executor
from kdispatch.actors.engine.groups import CallGroup
from kdispatch.actors.engine.holds import (
    Hold,
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
    settle,
)
from kdispatch.actors.engine.metrics import Metrics
from kdispatch.actors.engine.object_actor import ActorContext
from kdispatch.actors.engine.registry import Registry
from kdispatch.actors.model.backend import ApiBackend, missing_methods
from kdispatch.actors.model.call_types import default_call_types
from kdispatch.actors.model.calls import Call, CallTypeRegistry, plain_basis
from kdispatch.actors.model.config import DispatcherConfig, check_timeout
from kdispatch.actors.model.effects import when_gone
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

from .dispatcher_like import Backlog
from .group_host import GroupHostMixin

_STOP_GRACE = 0.25  # seconds stop() gives its threads after the drain deadline
_TURN_GRACE = 0.1  # at least this for the actor pool's workers to finish their turn


class Dispatcher(GroupHostMixin):
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
        self.config = config = _checked(backend, config, call_types, clock, send_gate)
        size_pool = getattr(backend, "size_pool", None)
        if callable(size_pool):  # e.g. KubernetesBackend: a connection per executor worker
            size_pool(config.executor.workers)
        self.call_types = call_types if call_types is not None else default_call_types()
        self.metrics = Metrics(metrics_registry, prefix=config.metrics_prefix)
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
        self._state_lock = threading.Condition(threading.Lock())
        # The futures not resolved yet, counted per lane with no lock (see Backlog)
        self._backlog = Backlog()
        self._drain_waiters = 0  # stop() calls waiting for the last future (under the lock)
        self._started = False
        self._closed = False
        self._drained: bool | None = None  # what the first stop() returned
        self._revoked: DispatcherClosed | None = None
        self._open = False  # started, not closed, not revoked: what submit checks (one read)
        self._housekeeper: pykka.ActorRef[Housekeeper] | None = None
        self._winding_down = threading.Event()  # set to end the housekeeper's wait
        self._gc = GcTuner(config.runtime)
        self._abandoned: list[tuple[Any, list[Any]]] = []  # actors stop() settled in bulk
        self._init_groups()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Caller thread. Start the actor pool, the executor and the idle reaper. Raises
        :class:`~kdispatch.InvalidInputError` if already started, or once stopped. A dispatcher
        revoked before it started keeps its intake shut (``submit`` raises the revoking error)."""
        with self._state_lock:
            self._mark_started()
            self._open = self._revoked is None  # _revoked is set under this lock
        self._pool.start()
        self._executor.start()
        self._housekeeper = Housekeeper.start(
            self._registry, self.config.reap_interval, self._winding_down
        )
        self._gc.start()
        return self

    def freeze_gc(self) -> None:
        """Any thread. Take every object alive now out of the cyclic collector's scans (collect
        the young generations, then ``gc.freeze()``, process-wide), e.g. after warm-up.
        ``stop()`` unfreezes."""
        self._gc.freeze()

    def stop(self, drain: bool = True, timeout: float | None = 30.0) -> bool:
        """Caller thread. Stop intake; with ``drain``, let pending calls finish until
        ``timeout`` seconds passed (None: until they all finished); then resolve everything left
        with :class:`DispatcherClosed`, stop this dispatcher's actors and threads (never pykka's
        global ``stop_all``). Returns True if every call finished before the deadline.
        Idempotent: a later call returns the first one's answer. A ``timeout`` that is not a
        number >= 0 or None raises :class:`~kdispatch.InvalidInputError`, and stops nothing.

        Returns within ``timeout`` + about 0.5 s whatever the backlog (one short grace period
        after the drain, the rest settled in bulk). A request still on the wire then is not
        waited for: its future resolves :class:`DispatcherClosed` (whether it landed is
        unknown) and its worker thread ends when the request returns."""
        seconds = check_timeout(timeout, allow_zero=True)
        deadline = None if seconds is None else time.monotonic() + seconds
        with self._state_lock:
            if self._closed:  # the first stop's answer, or where it stands while it runs
                return self._drained if self._drained is not None else not self._backlog.outstanding
            self._closed = True
            self._open = False
            self._ctx.closing = not drain
            idle = not self._backlog.outstanding
        self._seal_groups(draining=drain)  # no more steps: each resolves with its last step
        with self._state_lock:
            if drain and self._started:
                self._drain_waiters += 1
                try:
                    while self._backlog.outstanding:
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            break
                        self._state_lock.wait(left)
                finally:
                    self._drain_waiters -= 1
            drained = not self._backlog.outstanding if drain else idle
            self._ctx.closing = True
        # One deadline for every phase from here on.
        end = max(deadline or 0.0, time.monotonic()) + _STOP_GRACE
        _stop_housekeeper(self._housekeeper, self._winding_down, end)
        # no request starts any more; a request on the wire ends first (until the grace period)
        self._executor.stop(timeout=max(0.0, end - time.monotonic()))
        with collections_paused():
            # a turn in progress ends within a batch of messages: give it a moment even when
            # the executor used up the grace period
            stuck = self._pool.stop(timeout=max(_TURN_GRACE, end - time.monotonic()))
            if stuck:
                logger.warning("actor pool workers still in a turn after stop: {}", stuck)
            abandoned = self._registry.abandon_all()
            closed = _settle(abandoned, self.metrics)
            if self._backlog.waiters:
                self._backlog.wake()
            # freed with this Dispatcher object, not inside stop()'s promise (it takes long)
            self._abandoned = abandoned
        self.metrics.release()  # the registry may now take another dispatcher's metrics
        self._gc.stop()
        if closed:
            logger.debug("{} calls left at the deadline resolved DispatcherClosed", closed)
        logger.debug("dispatcher stopped (drained={})", drained)
        self._drained = drained
        return drained

    # ------------------------------------------------------------------ calls

    def submit(self, call: Call, *, after: Iterable[object] = ()) -> CallFuture:
        """Any thread; never blocks on the apiserver. Validate ``call`` and hand it to its
        object's actor. Raises :class:`~kdispatch.InvalidInputError` subclasses for
        bad calls and :class:`DispatcherClosed` once ``stop`` was called.

        ``after``: futures this dispatcher returned (a group's steps too) or a group's
        ``future``. The call is admitted at once but nothing of it is sent before every
        prerequisite resolved as a success (``SUCCESS``, ``SKIPPED``, ``OVERWRITTEN``); if one
        fails or is cancelled, it resolves :class:`~kdispatch.DependencyFailed` (``cause``: the
        prerequisite's error) unsent. While held it takes no token, worker or lane; the calls
        behind it on its object wait for it (docs/groups.md). Raises
        :class:`~kdispatch.InvalidPrerequisiteError` for anything else in ``after`` and
        :class:`~kdispatch.DependencyCycleError` for a call that would wait for itself."""
        return self._admit(call, after, None)

    def _admit(self, call: Call, after: Iterable[object], group: CallGroup | None) -> CallFuture:
        """Submitting thread: :meth:`submit`'s body, for the dispatcher and its groups."""
        self.call_types.check(call)
        basis = call.basis
        if basis is not None and type(basis) is not dict:  # most bases are dicts already
            call = plain_basis(call)
        prereqs = self._deps.prerequisites(after) if after else ()
        future = CallFuture()
        future.owner = self
        future.call = call
        # Counted before the checks: a stop() that starts now waits for this call (or sees it
        # withdrawn below), with no lock between the submitting threads and the actors.
        self._backlog.add(future, call.relevance)
        if not self._open:
            self._on_resolved(future)
            raise self._closed_error()
        uid = call.ref.uid
        message = Submit(call, future, NO_HOLDS, NO_HOLDS)
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
            routed = self._registry.tell(uid, message, self._ctx.spawn)
        except BaseException as exc:  # ActorLimitExceeded, or a spawn that failed: not pending
            if prereqs or group is not None:
                self._deps.discard(future, group)
            if group is not None:
                group._drop_step(future)  # never a step: the submit raises
            settle(future, CallFailed(str(exc), ref=call.ref, call_type=call.call_type, cause=exc))
            self._on_resolved(future)
            raise
        if not routed:  # tombstoned: the object was deleted, and a deletion got its way
            gone = CallCancelled("object deleted", ref=call.ref, call_type=call.call_type)
            self._resolve_now(future, call, when_gone(call, gone))
        if hold is not None:
            self._deps.arm(hold)
        return future

    def revoke(self, error: DispatcherClosed) -> None:
        """Any thread; never blocks. Stop intake at once (``submit`` raises ``error``) and resolve
        every call not yet sent with ``error`` (e.g. :class:`LeadershipLost`); a request on the
        wire finishes and reports as usual, but a call it would send again (to retry it, or
        rebased after a 409) resolves with ``error`` instead. Pair it with a ``send_gate``
        turned False (it refuses the later requests of a job started before the revocation)."""
        if not self._mark_revoked(error):
            return
        self._open = False
        groups = self._seal_groups(revoking=True)
        message = Revoke(error)
        for actor in self._registry.live_actors():
            actor.tell(message)
        for group in groups:  # after every actor was told: their Revoke comes first
            group._revoked(error)

    def cancel(self, uid: str, call_type: str | None = None) -> None:
        """Any thread. Withdraw the object's pending call (of ``call_type``, or any); its future
        resolves :class:`CallCancelled`. A call already in flight cannot be recalled."""
        check_uid(uid)
        if call_type is not None:
            self.call_types.spec(call_type)
        self._registry.tell(uid, Cancel(call_type))

    def view(self, uid: str, timeout: float | None = 5.0) -> Obj | None:
        """Caller thread (blocks for one actor round trip; never from an actor). The object as
        last observed with in-flight and pending mutations applied, or None if untracked;
        ``TimeoutError`` after ``timeout`` seconds (None: no limit)."""
        check_uid(uid)
        seconds = check_timeout(timeout)
        reply = self._ask_view(uid)
        return None if reply is None else reply.result(seconds)

    async def _aview(self, uid: str, timeout: float | None) -> Obj | None:
        reply = self._ask_view(uid)
        return None if reply is None else await await_future(reply, timeout)

    def _ask_view(self, uid: str) -> Future[Obj | None] | None:
        """Ask the object's actor for its view; None if the object is not tracked."""
        reply: Future[Obj | None] = Future()
        actor = self._registry.get(uid)
        if actor is None or not actor.tell(View(reply)):
            return None
        return reply

    def on_delete(self, obj: object, kind: str | None = None) -> None:
        """Informer thread (or the event loop); only tells. Cancels every pending call of the
        object, stops its actor and tombstones the UID so late events cannot resurrect it."""
        plain = as_object(obj)
        ref = ObjectRef.of(plain, kind)
        # Its groups first: a step on it that the deletion resolves must find its group
        # cancelled for this cause already (not "owner_withdrawn").
        if self._owners.owns(ref.uid):  # no lock unless it owns a call group
            self._cancel_owned(ref.uid, "owner_deleted")
        if not self._registry.tell(ref.uid, Deleted(plain)):
            self._registry.tombstone(ref.uid)

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
    def tokens_taken(self) -> int:
        """Tokens of the calls' bucket used so far (not Events' own); cheap, any thread."""
        return self._executor.tokens_taken

    def stats(self) -> dict[str, Any]:
        """Any thread; cheap (reads counters). Figures for reports, every key always present:

        ``sent``
            ``{call_type: n}``: requests sent per call type (re-reads included).
        ``sent_total``
            The sum of ``sent``; equals ``tokens_taken`` plus ``events["tokens_taken"]``.
        ``outcomes``
            ``{"call_type:outcome": n}``: futures resolved, per call type and outcome
            (``success``, ``skipped``, ``overwritten``, ``cancelled``, ``conflict``,
            ``stale``, ``not_found``, ``failed``, ``closed``).
        ``retries``
            ``{"call_type:reason": n}``: retries scheduled after a retryable failure, per call
            type and reason (``429``, ``5xx``, ``timeout``, ``connection``, ``bad_response``: a
            re-read answered with garbage, ``conflict``: a 409 rebased).
        ``live_actors``
            Object actors alive now.
        ``events_without_actor``
            Messages that found no actor: mostly informer events for objects with no call.
        ``tokens_taken``
            Tokens of the calls' bucket used (taken and not refunded).
        ``events``
            The Events: ``tokens_taken`` of their own bucket (0 with ``events_shared``);
            ``waiting`` for a worker and a token now; ``dropped``, ``{reason: n}`` unsent
            (``queue_full``: ``ExecutorConfig.events_max_pending`` waited already;
            ``throttled``: a follow-up found no spare token of a shared bucket).
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
        out["live_actors"] = self._registry.live_count()
        out["events_without_actor"] = self._registry.dropped
        out["tokens_taken"] = self._executor.tokens_taken
        out["events"] = {
            "tokens_taken": self._executor.event_tokens_taken,
            "waiting": self._executor.events_waiting,
            "dropped": dropped,
        }
        out["pid"] = os.getpid()
        return out

    def _on_resolved(self, future: CallFuture) -> None:
        """Any thread (an actor resolving ``future``, or ``submit`` withdrawing it)."""
        future.lane.pop()  # type: ignore[union-attr]  # set by _admit before any resolution
        if self._drain_waiters and not self._backlog.outstanding:
            with self._state_lock:
                self._state_lock.notify_all()
        if self._backlog.waiters:  # a thread waits in wait_backlog
            self._backlog.wake()


def _checked(
    backend: object,
    config: DispatcherConfig | None,
    call_types: CallTypeRegistry | None,
    clock: Callable[[], float],
    send_gate: Callable[[], bool] | None,
) -> DispatcherConfig:
    """The constructor's arguments checked (:class:`InvalidInputError`); the config. Any thread."""
    missing = missing_methods(backend, ApiBackend)
    if missing:
        raise InvalidInputError(
            f"backend must implement ApiBackend, got {type(backend).__name__} "
            f"(no {', '.join(missing)})"
        )
    if config is None:
        config = DispatcherConfig()
    if not isinstance(config, DispatcherConfig):
        raise InvalidInputError(f"config must be a DispatcherConfig, got {type(config).__name__}")
    if call_types is not None and not isinstance(call_types, CallTypeRegistry):
        raise InvalidInputError("call_types must be a CallTypeRegistry")
    if not callable(clock):
        raise InvalidInputError(f"clock must be a callable returning seconds, got {clock!r}")
    if send_gate is not None and not callable(send_gate):
        raise InvalidInputError("send_gate must be a callable returning bool, or None")
    return config


def _stop_housekeeper(
    ref: pykka.ActorRef[Housekeeper] | None, winding_down: threading.Event, end: float
) -> None:
    """Stopping thread: end the housekeeper's wait and stop it, by ``end``."""
    winding_down.set()
    if ref is not None:
        try:
            ref.stop(block=True, timeout=max(0.1, end - time.monotonic()))
        except pykka.Timeout:  # a reaping pass over many actors: it ends on its own
            logger.warning("the housekeeper is still reaping at the stop deadline")


def _settle(left: list[tuple[Any, list[Any]]], metrics: Metrics) -> int:
    """Stopping thread, once no actor turn runs: resolve the abandoned actors' open calls and
    queued submissions with :class:`DispatcherClosed`, counted in bulk; how many. A future a
    late turn resolved meanwhile keeps its answer. A queued view is answered None, as for an
    object no longer tracked."""
    closed: dict[str, int] = {}
    for actor, tells in left:
        pending = getattr(actor, "pending_types", ())  # settled here: no longer pending
        if pending:
            actor.pending_types = ()
            for call_type in pending:
                metrics.pending_delta(call_type, -1)
        open_calls: dict[CallFuture, Call] = getattr(actor, "open", None) or {}
        submitted = [(message.future, message.call) for message in tells if type(message) is Submit]
        for message in tells:
            if type(message) is View and not message.reply.done():
                message.reply.set_result(None)
        for future, call in [*open_calls.items(), *submitted]:
            if not future.done() and settle(
                future, DispatcherClosed("dispatcher stopped before the call completed")
            ):
                future.lane.pop()  # type: ignore[union-attr]  # set at submit
                closed[call.call_type] = closed.get(call.call_type, 0) + 1
        open_calls.clear()
    for call_type, count in closed.items():
        metrics.outcome(call_type, "closed", count)
    return sum(closed.values())


__all__ = ["CallGroup", "Dispatcher", "Outcome"]
