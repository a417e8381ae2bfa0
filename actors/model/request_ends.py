"""How the end of a request changes an object's rules (:meth:`RequestEnds.done`): success,
a retry within the budget, a 409 rebased on the object read back, a 404, a permanent failure,
and the read-back of a call whose requests went unanswered (docs/behaviour.md). Pure.
"""

from __future__ import annotations

from typing import Final

from .calls import Call
from .effects import Done, Effect, Rebased, Resolve, Result, Retire, about
from .errors import (
    ApiError,
    CallCancelled,
    CallConflict,
    CallFailed,
    DispatcherClosed,
    ObjectNotFound,
    Outcome,
)
from .lifecycle import Input, InvalidTransition, Life
from .object_queue import ObjectQueue
from .queue_policy import Entry

__all__ = ["RequestEnds"]

_OK: Final = Result.SUCCESS
_SKIPPED: Final = Outcome.SKIPPED
_SUCCESS: Final = Outcome.SUCCESS
_RETIRING: Final = Life.RETIRING


class RequestEnds(ObjectQueue):
    """The request in flight ended: :meth:`done` and its cases. Not thread-safe (the object's
    actor)."""

    __slots__ = ()

    def done(self, done: Done, now: float) -> list[Effect]:
        """The request in flight ended. ``now`` is the shell's clock (backoff, budget)."""
        entry, request = self.inflight, self.request
        if entry is None or request is None or entry.call is not done.call:
            raise InvalidTransition(f"done for {done.call.describe()} which is not in flight")
        self.inflight = self.request = None
        out: list[Effect] = []
        if self.life is _RETIRING:
            self._done_gone(out, entry, done, request.read)
            self._transition(Input.DONE)
            out.append(Retire(tombstone=False, final=True))
            return out
        call = entry.call
        if request.read:
            if request.verify:
                self._verified(out, entry, done)
            else:
                self._read_done(out, entry, done, now)
        elif done.result is _OK:  # the usual end: the call's own request succeeded
            obj = done.obj
            if obj is not None:
                self.observe(obj)
            else:
                self.land(call)
            out.append(Resolve(entry.future, call.call_type, _SUCCESS, None))
            if call.exclusive:
                self._retire(out, Input.GONE, "deleted by " + call.call_type)
            elif not self.queue:
                return out  # nothing waits: nothing to ask for
        else:
            self._send_failed(out, entry, done, now)
        return self._ready(out)

    def _send_failed(self, out: list[Effect], entry: Entry, done: Done, now: float) -> None:
        """The call's own request ended without success."""
        result = done.result
        if result is Result.NOT_FOUND:
            self._not_found(out, entry)
        elif result is Result.CONFLICT:
            self._conflict(out, entry, done)
        elif result is Result.RETRY:
            error = done.error
            unanswered = False
            if done.applied:  # the request may have been applied
                self.ambiguous(entry.sent_rv)
                unanswered = isinstance(error, ApiError) and error.ambiguous
            self._retry_or_fail(out, entry, done, now, unanswered=unanswered)
        else:
            self._failed(out, entry, done)

    def _read_done(self, out: list[Effect], entry: Entry, done: Done, now: float) -> None:
        """The re-read before ``entry`` ended: adopt the object and put the call back first."""
        result = done.result
        if result is Result.SUCCESS and done.obj is not None:
            self.adopt_fresh(done.obj)
            self._requeue_front(out, entry)
            self._revisit(out)
        elif result is Result.NOT_FOUND:
            self._not_found(out, entry)
        elif result is Result.RETRY or result is Result.SUCCESS:  # no object: retried
            self._retry_or_fail(out, entry, done, now)
        else:
            self._failed(out, entry, done)

    def _done_gone(self, out: list[Effect], entry: Entry, done: Done, read: bool) -> None:
        """The request in flight ended after the object was deleted: nothing is retried, and a
        deletion got its way."""
        call = entry.call
        result = done.result
        if result is Result.NOT_FOUND:
            out.append(Resolve(entry.future, call.call_type, self._not_found_outcome(call)))
        elif result is Result.FAILED and not read:
            self._failed(out, entry, done)
        elif call.exclusive or (result is Result.SUCCESS and not read):
            out.append(Resolve(entry.future, call.call_type, _SUCCESS))
        else:
            self._fail(out, entry, CallCancelled, "object deleted")

    def _verified(self, out: list[Effect], entry: Entry, done: Done) -> None:
        """The read of a call whose retries ran out unanswered ended: ``SUCCESS`` if the object
        shows it landed (:meth:`~.calls.Call.landed`), else ``CallFailed`` saying why."""
        call = entry.call
        ctype = call.call_type
        assert entry.unanswered is not None  # _send sent this read for it
        why, cause = entry.unanswered
        entry.unanswered = None
        result, fresh = done.result, done.obj
        if result is Result.NOT_FOUND and call.exclusive:
            self._not_found(out, entry)  # gone, as intended
            return
        if result is Result.SUCCESS and fresh is not None:
            self.adopt_fresh(fresh)  # an object of another UID is not adopted
            if call.landed(fresh):
                out.append(Resolve(entry.future, ctype, _SUCCESS))
                if call.exclusive:
                    self._retire(out, Input.GONE, "deleted by " + ctype)
                else:
                    self._revisit(out)
                return
            why += "; read back, the object shows it did not land"
        elif result is Result.NOT_FOUND:
            why += "; read back, the object is not found: it did not land"
        else:
            why += f"; the outcome is unknown: reading the object back failed: {done.error}"
        error = CallFailed(about(call.ref, why), uid=self.uid, call_type=ctype, cause=cause)
        out.append(Resolve(entry.future, ctype, error))
        self._revisit(out)

    def _conflict(self, out: list[Effect], entry: Entry, done: Done) -> None:
        """409: rebase on the object read back (or re-read before the next attempt), within the
        bound on conflicts; a call that landed anyway succeeds."""
        call = entry.call
        fresh = done.obj
        if fresh is not None:
            self.adopt_fresh(fresh)
            if call.landed(fresh):
                out.append(Resolve(entry.future, call.call_type, _SUCCESS))
                self._revisit(out)
                return
        else:
            self.reread_failed()
        retry = entry.retry = entry.retry.conflicted()
        if retry.conflicts > self.retry.max_conflict_retries:
            why = f"conflict after {retry.conflicts} re-reads: {done.error}"
            self._fail(out, entry, CallConflict, why)
            return
        if entry.withdrawn is None or not entry.cancelled:
            out.append(Rebased(call.call_type))
        self._requeue_front(out, entry)
        self._revisit(out)

    def _not_found_outcome(self, call: Call) -> Outcome | ObjectNotFound:
        """A 404 for ``call``: what a deletion wanted, an error for anything else."""
        if call.exclusive:
            return _SUCCESS
        return ObjectNotFound(
            about(call.ref, "object not found"), uid=self.uid, call_type=call.call_type
        )

    def _not_found(self, out: list[Effect], entry: Entry) -> None:
        """404: a deletion that finds its object gone has done its job; anything else fails
        ``ObjectNotFound``; the object retires."""
        call = entry.call
        out.append(Resolve(entry.future, call.call_type, self._not_found_outcome(call)))
        self._retire(out, Input.GONE, "object not found")

    def _retry_or_fail(
        self, out: list[Effect], entry: Entry, done: Done, now: float, *, unanswered: bool = False
    ) -> None:
        """A retryable failure: back off and go again, within the budget and ``max_attempts``
        failed requests (re-reads included). ``unanswered``: the call's own request went
        unanswered, so it may have landed."""
        if entry.withdrawn is not None and entry.cancelled:
            out.append(
                Resolve(entry.future, entry.call.call_type, self._withdrawn(entry, in_flight=True))
            )
            return
        config = self.retry
        retry = entry.retry
        deadline = retry.deadline if retry.deadline is not None else now + config.budget
        at = now + done.delay
        retry = entry.retry = retry.failed(at, deadline, unanswered=unanswered)
        attempts = config.max_attempts
        if at > deadline or (attempts is not None and retry.failures >= attempts):
            call = entry.call
            why = (
                f"gave up after {retry.failures} failed requests "
                f"({config.budget:g} s retry budget): {done.error}"
            )
            last = done.error
            if retry.attempt > 0 and retry.unanswered:
                # no answer says whether an attempt landed: the call stays in flight for one
                # more request, a read of its object, and is never merged meanwhile (a call of
                # its type waits behind it, to go on its own budget)
                entry.unanswered = (why, last)
                self.inflight = entry  # with no request: the read waits for a grant (_ready)
                return
            error = CallFailed(
                about(call.ref, why), uid=self.uid, call_type=call.call_type, cause=done.error
            )
            out.append(Resolve(entry.future, call.call_type, error))
            return
        if self.untrusted_rv is None and retry.attempt > 0 and entry.call.is_noop(self.observed):
            out.append(Resolve(entry.future, entry.call.call_type, _SKIPPED))  # it shows now
            return
        self._requeue_front(out, entry)

    def _failed(self, out: list[Effect], entry: Entry, done: Done) -> None:
        """A permanent failure (or the send gate refused: leadership lost)."""
        error = done.error
        call = entry.call
        if isinstance(error, DispatcherClosed):
            out.append(Resolve(entry.future, call.call_type, error))
            return
        failed = CallFailed(
            about(call.ref, f"{call.call_type} failed: {error}"),
            uid=self.uid,
            call_type=call.call_type,
            cause=error,
        )
        out.append(Resolve(entry.future, call.call_type, failed))
