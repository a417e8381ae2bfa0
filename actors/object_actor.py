"""One lightweight actor per object (Pod, ResourceClaim, ...), keyed by UID.

The actor owns everything about its object: the newest observed state, at most one *pending*
(merged) call and at most one call *in flight*, and the futures of both. Every rule of DESIGN §3
"Per-object rules" lives here; since one actor handles one message at a time, the rules need no
locks, and since only the actor resolves its futures, each future resolves exactly once.

All ``on_*``/``_handle_*`` methods run on a pool thread of :mod:`actors.runtime`, one message at a
time per actor. They never block: the executor and the actor talk only in messages
(``Ready`` → ``Grant`` → ``Job``/``Refund`` → ``Done``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import InvalidStateError
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pykka
from loguru import logger

from .calls import Call
from .config import RetryConfig
from .errors import (
    CallCancelled,
    CallConflict,
    CallFailed,
    CallOutcomeError,
    DispatcherClosed,
    ObjectNotFound,
    Outcome,
)
from .messages import (
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
from .metrics import Metrics
from .objects import Obj, get_path, is_newer, resource_version
from .registry import ReapRequest, Registry
from .runtime import ActorPool, PooledActor


@dataclass(slots=True)
class ActorContext:
    """What every object actor of one dispatcher shares (one instance per dispatcher)."""

    registry: Registry
    executor: Callable[[Ready | Job | Refund], None]
    metrics: Metrics
    retry: RetryConfig
    clock: Callable[[], float]
    on_resolved: Callable[[], None]
    spawn: Callable[[str], pykka.ActorRef[Any]]
    closing: bool = False


@dataclass(slots=True)
class _Entry:
    """A tracked call (pending or in flight) and its caller's future."""

    call: Call
    future: CallFuture
    attempt: int = 0  # attempts already made
    conflicts: int = 0  # 409 rebases already made
    not_before: float = 0.0  # executor clock; backoff after a retryable error
    sent_rv: str | None = None  # resourceVersion the last attempt was computed against


_OUTCOME_LABEL = {
    Outcome.SUCCESS: "success",
    Outcome.SKIPPED: "skipped",
    Outcome.OVERWRITTEN: "overwritten",
}


class ObjectActor(PooledActor):
    """Serializes, merges and elides the calls of one object. Runs on the actor pool."""

    def __init__(self, uid: str, ctx: ActorContext, *, pool: ActorPool) -> None:
        super().__init__(pool=pool)
        self.uid = uid
        self.ctx = ctx
        self.observed: Obj | None = None
        self.pending: _Entry | None = None
        self.inflight: _Entry | None = None
        self.gone = False  # object deleted: accept nothing, stop once nothing is in flight
        self.handling: _Entry | None = None  # the submitted call being handled (crash safety)
        self.granted = False  # a Grant is being handled and not yet answered (crash safety)
        # After an attempt failed ambiguously (the request may or may not have been applied),
        # the observed object is not trusted until one newer than this resourceVersion arrives:
        # no-op elision pauses and the next attempt re-reads the object from the server.
        self.uncertain_rv: str | None = None
        self.landed: Call | None = None  # succeeded without a reply object, not yet observed

    # ------------------------------------------------------------------ resolution

    def _resolve(
        self, entry: _Entry, outcome: Outcome | CallOutcomeError | DispatcherClosed
    ) -> None:
        """Resolve one future (exactly once: only this actor resolves its futures)."""
        call_type = entry.call.call_type
        try:
            if isinstance(outcome, Outcome):
                entry.future.set_result(outcome)
                label = _OUTCOME_LABEL[outcome]
            else:
                entry.future.set_exception(outcome)
                label = "closed" if isinstance(outcome, DispatcherClosed) else outcome.result_label
        except InvalidStateError:  # pragma: no cover - would be a bug: never resolve twice
            logger.error("future of {} resolved twice", entry.call.describe())
            raise
        self.ctx.metrics.outcome(call_type, label)
        self.ctx.on_resolved()
        # keyword arguments land in the record's ``extra`` (loguru's capture)
        logger.debug("{call_type} {uid}: {result}", uid=self.uid, call_type=call_type, result=label)

    def _fail(self, entry: _Entry, exc_type: type[CallOutcomeError], why: str) -> None:
        self._resolve(entry, exc_type(why, uid=self.uid, call_type=entry.call.call_type))

    def _set_pending(self, entry: _Entry | None) -> None:
        old = self.pending
        if old is not None:
            self.ctx.metrics.pending_delta(old.call.call_type, -1)
        if entry is not None:
            self.ctx.metrics.pending_delta(entry.call.call_type, 1)
        self.pending = entry

    def _drop_pending(self, outcome: Outcome | CallOutcomeError | DispatcherClosed) -> None:
        entry = self.pending
        if entry is not None:
            self._set_pending(None)
            self._resolve(entry, outcome)

    def _notify_executor(self) -> None:
        """Tell the executor there is something to send (if nothing is in flight)."""
        entry = self.pending
        if entry is not None and self.inflight is None:
            self.ctx.executor(
                Ready(self.uid, self.actor_ref, entry.call.relevance, entry.not_before)
            )

    def _accepts(self, obj: Obj | None) -> bool:
        """Whether ``obj`` is a newer state of *this* object. Anything else (a reply for another
        UID, garbage without metadata, the same or an older resourceVersion) is ignored: the
        current view may hold mutations applied on top of that version."""
        return (
            obj is not None
            and get_path(obj, "metadata", "uid") == self.uid
            and is_newer(obj, self.observed, strict=True)
        )

    def _observe(self, obj: Obj | None) -> None:
        if obj is not None and self._accepts(obj):
            self._adopt(obj)

    def _adopt(self, obj: Obj) -> None:
        """Make ``obj`` (accepted as newer) the observed state. A call known to have landed
        whose reply carried no object (a binding) stays applied on top until an observed
        object shows it: an informer event written before it may still arrive after it."""
        landed = self.landed
        if landed is not None:
            if landed.is_noop(obj):
                self.landed = None
            else:
                obj = landed.apply(obj)
        self.observed = obj
        self._check_certain()

    def _check_certain(self) -> None:
        """Trust the observed object again once it is newer than the ambiguous attempt's
        basis: with resourceVersion preconditions, any newer state either contains that
        request or proves it was never applied."""
        rv = self.uncertain_rv
        if rv is None:
            return
        observed = self.observed
        if resource_version(observed) is not None and is_newer(
            observed or {}, {"metadata": {"resourceVersion": rv}}, strict=True
        ):
            self.uncertain_rv = None

    def _is_noop(self, call: Call) -> bool:
        """Whether ``call`` changes nothing: it must hold against the observed object *and*
        against it with the in-flight call applied (that call may land or not). Paused while
        the observed object is uncertain."""
        if self.uncertain_rv is not None or not call.is_noop(self.observed):
            return False
        inflight, observed = self.inflight, self.observed
        if inflight is not None and observed is not None:
            return call.is_noop(inflight.call.apply(observed))
        return True

    # ------------------------------------------------------------------ message dispatch

    def on_receive(self, message: Any) -> Any:
        """Pool thread. Dispatch one message."""
        if isinstance(message, Submit):
            self.handling = _Entry(message.call, message.future)
            self._on_submit(self.handling)
            self.handling = None
            return None
        if isinstance(message, Grant):
            return self._on_grant(message.now)
        if isinstance(message, Done):
            return self._on_done(message)
        if isinstance(message, Observed):
            return self._on_observed(message.obj)
        if isinstance(message, Deleted):
            return self._on_deleted()
        if isinstance(message, View):
            return self._view()
        if isinstance(message, Cancel):
            return self._on_cancel(message.call_type)
        if isinstance(message, ReapRequest):
            return self._on_reap(message)
        if isinstance(message, Close):
            return self._on_close()
        return super().on_receive(message)

    # ------------------------------------------------------------------ submit: the merge rules

    def _on_submit(self, entry: _Entry) -> None:
        call = entry.call
        if self.ctx.closing:
            self._resolve(entry, DispatcherClosed("dispatcher is stopping"))
            return
        if self.gone:
            self._fail(entry, CallCancelled, "object deleted")
            return
        self._observe(call.basis)
        pending, inflight = self.pending, self.inflight

        if call.exclusive:
            # A deletion/preemption cancels everything pending and becomes the only pending call.
            if pending is not None and pending.call.call_type == call.call_type:
                self.ctx.metrics.merge(call.call_type)
                entry.call = call.merge(pending.call)
                entry.attempt, entry.not_before = pending.attempt, pending.not_before
                self._drop_pending(Outcome.OVERWRITTEN)
            else:
                self._drop_pending(
                    CallCancelled(
                        f"preempted by {call.call_type}",
                        uid=self.uid,
                        call_type=pending.call.call_type if pending else "",
                    )
                )
            if inflight is not None and inflight.call.call_type == call.call_type:
                # the same deletion is already on its way
                self._resolve(entry, Outcome.SKIPPED)
                return
            if self._is_noop(entry.call):
                self._resolve(entry, Outcome.SKIPPED)
                return
            self._set_pending(entry)
            self._notify_executor()
            return

        tracked = [e for e in (pending, inflight) if e is not None]
        if any(e.call.exclusive for e in tracked):
            self._fail(entry, CallCancelled, "object is being deleted")
            return
        reason = call.precheck(self.observed)
        if reason is not None:
            self._fail(entry, CallConflict, reason)
            return
        top = max((e.call.relevance for e in tracked), default=0)
        if call.relevance < top:
            self._resolve(entry, Outcome.SKIPPED)  # less relevant than a tracked call
            return

        if pending is not None and pending.call.call_type == call.call_type:
            # same type: merge, the newer values win, the older call fills the gaps
            self.ctx.metrics.merge(call.call_type)
            entry.call = call.merge(pending.call)
            entry.attempt, entry.conflicts = pending.attempt, pending.conflicts
            entry.not_before = pending.not_before
            self._drop_pending(Outcome.OVERWRITTEN)
            if self._is_noop(entry.call):
                self._resolve(entry, Outcome.SKIPPED)
                return
            self._set_pending(entry)
            self._notify_executor()
            return

        if self._is_noop(call):
            self._resolve(entry, Outcome.SKIPPED)
            return

        if pending is not None:
            # more relevant than the pending call: take over its place (and its backoff)
            entry.not_before = pending.not_before
            self._drop_pending(Outcome.OVERWRITTEN)
        self._set_pending(entry)
        self._notify_executor()

    # ------------------------------------------------------------------ executor handshake

    def _on_grant(self, now: float) -> None:
        """The executor reserved a token and a worker for this object: hand over the current
        merged call (it moves to in flight), or refund if there is nothing to send now."""
        self.granted = True
        entry = self.pending
        job = None
        if entry is not None and self.inflight is None and not self.gone:
            if entry.not_before > now:
                pass  # backing off; a delayed Ready is queued
            elif self._is_noop(entry.call):
                self._drop_pending(Outcome.SKIPPED)
            elif (reason := entry.call.precheck(self.observed)) is not None:
                self._set_pending(None)
                self._fail(entry, CallConflict, reason)
            else:
                self._set_pending(None)
                entry.attempt += 1
                self.inflight = entry
                basis = None if self.uncertain_rv is not None else self.observed
                entry.sent_rv = resource_version(self.observed)
                job = Job(self.actor_ref, entry.call, basis, entry.attempt)
        self.ctx.executor(job if job is not None else Refund(self.uid))
        self.granted = False

    def _on_done(self, done: Done) -> None:
        entry = self.inflight
        if entry is None or entry.call is not done.call:
            logger.warning("stale Done for {} ({})", done.call.describe(), self.uid)
            return
        self.inflight = None
        result = done.result
        if result is Result.SUCCESS:
            if done.obj is not None:
                self._observe(done.obj)
            elif self.observed is not None and self.uncertain_rv is None:
                # no object in the reply (a binding): the server now reflects this call
                self.observed = entry.call.apply(self.observed)
                self.landed = entry.call
            self._resolve(entry, Outcome.SUCCESS)
            if entry.call.exclusive:  # the object is being deleted
                self._retire("deleted by " + entry.call.call_type)
                return
        elif result is Result.NOT_FOUND:
            self._resolve(
                entry,
                # a deletion that finds its object gone has done its job
                Outcome.SUCCESS
                if entry.call.exclusive
                else ObjectNotFound(
                    "object not found", uid=self.uid, call_type=entry.call.call_type
                ),
            )
            self._retire("object not found")
            return
        elif self.gone and result in (Result.CONFLICT, Result.RETRY):
            # deleted while in flight: nothing left to retry against; a deletion got its way
            if entry.call.exclusive:
                self._resolve(entry, Outcome.SUCCESS)
            else:
                self._fail(entry, CallCancelled, "object deleted")
        elif result is Result.CONFLICT:
            self._observe(done.obj)
            entry.conflicts += 1
            if entry.conflicts > self.ctx.retry.max_conflict_retries:
                self._fail(
                    entry, CallConflict, f"conflict after {entry.conflicts} attempts: {done.error}"
                )
            else:
                self.ctx.metrics.retry(entry.call.call_type, "conflict")
                self._requeue(entry, 0.0)
        elif result is Result.RETRY:
            if entry.attempt >= self.ctx.retry.max_attempts:
                self._resolve(
                    entry,
                    CallFailed(
                        f"gave up after {entry.attempt} attempts: {done.error}",
                        uid=self.uid,
                        call_type=entry.call.call_type,
                        cause=done.error,
                    ),
                )
            else:
                # the request may have been applied: distrust what we observed before it
                if self.uncertain_rv is None:
                    self.uncertain_rv = entry.sent_rv or ""
                    self._check_certain()
                if self.uncertain_rv is None and entry.call.is_noop(self.observed):
                    # a newer object already shows the intent (e.g. the informer saw our write)
                    self._resolve(entry, Outcome.SKIPPED)
                else:
                    self._requeue(entry, done.delay)
        else:
            self._resolve(
                entry,
                CallFailed(
                    f"{entry.call.call_type} failed: {done.error}",
                    uid=self.uid,
                    call_type=entry.call.call_type,
                    cause=done.error,
                ),
            )
        if self.gone:
            self._finish_gone()
            return
        self._notify_executor()

    def _requeue(self, entry: _Entry, delay: float) -> None:
        """Put a retried call back as pending, merged with whatever arrived meanwhile."""
        entry.not_before = self.ctx.clock() + delay
        pending = self.pending
        if pending is None:
            self._set_pending(entry)
        elif pending.call.call_type == entry.call.call_type:
            self.ctx.metrics.merge(entry.call.call_type)
            pending.call = pending.call.merge(entry.call)
            pending.attempt = max(pending.attempt, entry.attempt)
            pending.not_before = max(pending.not_before, entry.not_before)
            self._resolve(entry, Outcome.OVERWRITTEN)
        else:
            # a more relevant call (or a deletion) took over while this one was in flight
            outcome: Outcome | CallOutcomeError = (
                CallCancelled(
                    "object is being deleted", uid=self.uid, call_type=entry.call.call_type
                )
                if pending.call.exclusive
                else Outcome.OVERWRITTEN
            )
            self._resolve(entry, outcome)

    # ------------------------------------------------------------------ informer events

    def _on_observed(self, obj: Obj) -> None:
        if not self._accepts(obj):
            return
        self._adopt(obj)
        entry = self.pending
        if entry is None:
            return
        if self._is_noop(entry.call):
            self._drop_pending(Outcome.SKIPPED)
            return
        reason = entry.call.precheck(self.observed)
        if reason is not None:
            self._set_pending(None)
            self._fail(entry, CallConflict, reason)

    def _on_deleted(self) -> None:
        self._retire("object deleted")

    def _retire(self, why: str) -> None:
        """The object is gone: cancel what is pending, refuse new calls, and leave the
        registry (tombstoned) once nothing is in flight."""
        self.gone = True
        entry = self.pending
        if entry is not None:
            self._set_pending(None)
            if entry.call.exclusive:  # a pending deletion: the object is gone, as intended
                self._resolve(entry, Outcome.SUCCESS)
            else:
                self._fail(entry, CallCancelled, why)
        self.ctx.registry.tombstone(self.uid)
        if self.inflight is None:
            self._finish_gone()

    def _finish_gone(self) -> None:
        self.ctx.registry.retire(self.uid, self.actor_ref)
        self.stop()

    def _on_cancel(self, call_type: str | None) -> None:
        entry = self.pending
        if entry is not None and call_type in (None, entry.call.call_type):
            self._set_pending(None)
            self._fail(entry, CallCancelled, "cancelled by caller")

    # ------------------------------------------------------------------ view, reaping, closing

    def _view(self) -> Obj | None:
        obj = self.observed
        if obj is None:
            return None
        for entry in (self.inflight, self.pending):
            if entry is not None:
                obj = entry.call.apply(obj)
        return obj

    def _on_reap(self, request: ReapRequest) -> None:
        idle = self.pending is None and self.inflight is None and not self.gone
        if idle and self.ctx.registry.release(self.uid, self.actor_ref, request.generation):
            self.stop()

    def _on_close(self) -> None:
        closed = DispatcherClosed("dispatcher stopped before the call completed")
        self._drop_pending(closed)
        entry, self.inflight = self.inflight, None
        if entry is not None:
            self._resolve(entry, closed)
        self.stop()

    # ------------------------------------------------------------------ failure and leftovers

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Pool thread. A bug (e.g. in a custom merger) crashed this actor: fail this object's
        futures with the error and leave the registry so the next message spawns a clean actor.
        Other objects are untouched."""
        self.ctx.metrics.actor_failures.inc()
        logger.opt(exception=exception_value).error("object actor for {} crashed", self.uid)
        for entry in (self.handling, self.pending, self.inflight):
            if entry is not None and not entry.future.done():
                self._resolve(
                    entry,
                    CallFailed(
                        f"object actor crashed: {exception_value!r}",
                        uid=self.uid,
                        call_type=entry.call.call_type,
                        cause=exception_value,
                    ),
                )
        self._set_pending(None)
        self.inflight = self.handling = None
        if self.granted:  # the crash interrupted a grant: give the slot and token back
            self.granted = False
            self.ctx.executor(Refund(self.uid))
        self.ctx.registry.forget(self.uid, self.actor_ref)

    def on_dropped(self, message: object) -> None:
        """Pool thread. A message that reached this actor after it stopped: route it to the
        object's current actor (or resolve its future), never lose it silently."""
        if isinstance(message, Submit):
            if self.ctx.closing:
                self._resolve(
                    _Entry(message.call, message.future), DispatcherClosed("dispatcher is stopping")
                )
                return
            try:
                routed = self.ctx.registry.tell(self.uid, message, lambda: self.ctx.spawn(self.uid))
            except Exception as exc:  # ActorLimitExceeded
                self._resolve(
                    _Entry(message.call, message.future),
                    CallFailed(str(exc), uid=self.uid, call_type=message.call.call_type, cause=exc),
                )
                return
            if not routed:
                self._fail(_Entry(message.call, message.future), CallCancelled, "object deleted")
        elif isinstance(message, Observed | Cancel):
            self.ctx.registry.tell(self.uid, message)
        elif isinstance(message, Grant):
            self.ctx.executor(Refund(self.uid))
