"""What every input of one object's rules reads (its :class:`~.knowledge.Knowledge`, the
pending calls in send order, the call in flight) and the rules the inputs share: judging a
call (once per observed object: ``Entry.judged``), going in flight, putting a call back,
retiring, asking for a grant. Pure: time comes in as ``now``.
"""

from __future__ import annotations

from typing import Any, Final

from .calls import Call
from .config import RetryConfig
from .effects import Effect, Merged, Ready, Resolve, Retire, Send, about, when_gone
from .errors import (
    CallCancelled,
    CallConflict,
    CallOutcomeError,
    CallStale,
    DispatcherClosed,
    Outcome,
)
from .knowledge import Knowledge
from .lifecycle import LIFECYCLE, Input, Life, State
from .objects import Obj
from .queue_policy import FRESH, SENT_ONCE, Entry, place

__all__ = ["ObjectQueue"]

_LIVE, _RETIRING, _RETIRED = Life.LIVE, Life.RETIRING, Life.RETIRED
_SKIPPED: Final = Outcome.SKIPPED
_OVERWRITTEN: Final = Outcome.OVERWRITTEN


class ObjectQueue(Knowledge):
    """The queue of one object and the rules its inputs share. Not thread-safe: the object's
    actor feeds it one input at a time (:class:`~.object_state.ObjectState` is the whole
    machine)."""

    __slots__ = ("inflight", "life", "queue", "ready_lane", "request", "retry", "revoked")

    def __init__(self, uid: str, retry: RetryConfig) -> None:
        super().__init__(uid)
        self.retry = retry
        self.life = _LIVE
        self.queue: list[Entry] = []  # pending calls in send order, one per call type
        # the call whose request is on the wire, or whose read-back waits for a grant
        self.inflight: Entry | None = None
        # that request (the call, the re-read before it, or its read-back); None while the
        # read-back waits for a grant (_reading_back)
        self.request: Send | None = None
        # The lane of the Ready the executor holds for this object, if any: a Ready is only
        # repeated for a more urgent head.
        self.ready_lane: int | None = None
        # Leadership lost (revoke): what every call not on the wire resolves with from now on
        self.revoked: DispatcherClosed | None = None

    @property
    def state(self) -> State:
        """The coarse state: the life, and for a live object a view of its queue."""
        life = self.life
        if life is _RETIRING:
            return State.RETIRING
        if life is _RETIRED:
            return State.RETIRED
        if self.inflight is None:
            return State.PENDING if self.queue else State.IDLE
        return State.IN_FLIGHT_PENDING if self.queue else State.IN_FLIGHT

    @property
    def idle(self) -> bool:
        """Nothing pending or in flight and the object not gone: the actor may be reaped."""
        return self.life is _LIVE and not self.queue and self.inflight is None

    def view(self) -> Obj | None:
        """The observed object with the in-flight and pending mutations applied."""
        obj = self.observed
        if obj is None:
            return None
        if self.inflight is not None:
            obj = self.inflight.call.apply(obj)
        for entry in self.queue:
            obj = entry.call.apply(obj)
        return obj

    def futures(self) -> list[Any]:
        """The futures of every tracked call."""
        entries = [*self.queue, *([self.inflight] if self.inflight is not None else [])]
        return [e.future for e in entries]

    # ------------------------------------------------------------------ judging

    def _is_noop(self, call: Call) -> bool:
        """Whether ``call`` changes nothing: against the observed object *and* against it with
        the call in flight applied (that call may land or not). Never while untrusted."""
        if self.untrusted_rv is not None or not call.is_noop(self.observed):
            return False
        inflight, observed = self.inflight, self.observed
        if inflight is not None and observed is not None:
            return call.is_noop(inflight.call.apply(observed))
        return True

    def _judge(self, entry: Entry) -> Resolve | None:
        """How a pending call ends unsent against the current object: ``SKIPPED``,
        ``CallStale`` or ``CallConflict`` (precheck); None when it is still to be sent."""
        call = entry.call
        observed = self.observed
        settled = self.inflight is None and self.untrusted_rv is None
        if not (settled and entry.judged is observed and observed is not None):
            if self._is_noop(call):
                return Resolve(entry.future, call.call_type, _SKIPPED)
            if (reason := call.revalidate(call.basis, observed)) is not None:
                stale = CallStale(about(call.ref, reason), uid=self.uid, call_type=call.call_type)
                return Resolve(entry.future, call.call_type, stale)
            if settled:
                entry.judged = observed
        # the precheck (fail fast) runs at every grant: the last word before the request
        if (reason := call.precheck(observed)) is not None:
            return self._conflict_with(entry, reason)
        return None

    def _conflict_with(self, entry: Entry, reason: str) -> Resolve:
        """``entry`` fails its precheck for ``reason``: ``CallConflict``, nothing sent."""
        call = entry.call
        error = CallConflict(about(call.ref, reason), uid=self.uid, call_type=call.call_type)
        return Resolve(entry.future, call.call_type, error)

    def _revisit(self, out: list[Effect]) -> None:
        """After the object changed: elide, re-validate and precheck every pending call."""
        keep: list[Entry] = []
        for entry in self.queue:
            verdict = self._judge(entry)
            if verdict is None:
                keep.append(entry)
            else:
                out.append(verdict)
        self.queue = keep

    # ------------------------------------------------------------------ the queue

    def _send(self, entry: Entry) -> Send:
        """``entry`` goes in flight: its request, or the re-read it needs first."""
        self.inflight = entry
        call = entry.call
        retry = entry.retry
        if entry.unanswered is not None:
            send = Send(call, None, retry.attempt, True, True, retry.failures)
        elif call.reads_object and not self.trusted:
            send = Send(call, None, retry.attempt, True, False, retry.failures)
        else:
            retry = entry.retry = SENT_ONCE if retry is FRESH else retry.sent()
            entry.sent_rv = self.observed_rv
            send = Send(call, self.observed, retry.attempt, False, False, retry.failures)
        self.request = send
        return send

    def _requeue_front(self, out: list[Effect], entry: Entry) -> None:
        """Put a call that was in flight back at the head, merged with a call of its type that
        arrived meanwhile, unless a superseding call that does not wait for it, or an
        exclusive call, took over. A call withdrawn while in flight resolves ``CallCancelled``."""
        ctype = entry.call.call_type
        if entry.withdrawn is not None and entry.cancelled:
            out.append(Resolve(entry.future, ctype, self._withdrawn(entry, in_flight=True)))
            return
        queue = self.queue
        for i, pending in enumerate(queue):
            if pending.call.call_type == ctype:  # (a deletion behind its own type's too)
                self._merge(out, pending, entry)
                place(queue, queue.pop(i), 0)
                return
            if pending.call.exclusive:  # it replaces this call: it waits out its backoff
                pending.retry = pending.retry.waiting_until(entry.retry.not_before)
                self._fail(out, entry, CallCancelled, "object is being deleted")
                return
            if ctype in pending.call.supersedes and not (
                pending.holds and pending.behind and entry.carries_any(pending.behind)
            ):  # (a held call that waits for this one leaves it alone: it goes first)
                pending.supersede(entry)
                out.append(Resolve(entry.future, ctype, _OVERWRITTEN, pending.future))
                return
        queue.insert(0, entry)

    @staticmethod
    def _merge(out: list[Effect], entry: Entry, older: Entry) -> None:
        """The newer ``entry`` absorbs ``older``, of its type (:meth:`Entry.merge_older`)."""
        ctype = entry.call.call_type
        out.append(Merged(ctype))
        entry.merge_older(older)
        out.append(Resolve(older.future, older.call.call_type, _OVERWRITTEN, entry.future))

    def _withdrawn(self, entry: Entry, *, in_flight: bool = False) -> CallCancelled:
        """The error of a withdrawn ``entry``: by its caller, or for the cause it was
        withdrawn for (the object named first, the cause carried)."""
        call = entry.call
        when = " while in flight" if in_flight else ""
        cause = entry.withdrawn_for
        if cause is None:
            why = about(call.ref, f"withdrawn by caller{when}")
            return CallCancelled(why, uid=self.uid, call_type=call.call_type)
        return CallCancelled(
            f"withdrawn{when}: {cause}", ref=call.ref, call_type=call.call_type, cause=cause
        )

    def _ready(self, out: list[Effect]) -> list[Effect]:
        """The one place that decides readiness: ask for a grant when the head call holds
        nothing and nothing is in flight, or when the call in flight waits to read its object
        back (:meth:`_reading_back`; in the lane of the most urgent call behind it), and no
        Ready is held in its lane or a higher one. Once revoked, nothing is: what waits
        resolves with the revocation's error instead."""
        if self.revoked is not None:
            self._withhold(out, self.revoked)
            return out
        inflight = self.inflight
        queue = self.queue
        if inflight is None:
            if not queue:
                return out
            head = queue[0]
            if head.holds:
                return out
            relevance = head.call.relevance
        elif self.request is None:  # its read-back waits for a grant
            head = inflight
            # in the lane of the most urgent call waiting behind it, if more urgent (a
            # preemption must not wait for a status patch's lane)
            relevance = max([head.call.relevance, *[e.call.relevance for e in queue]])
        else:
            return out
        if self.life is _LIVE:
            lane = self.ready_lane
            if lane is None or relevance > lane:
                self.ready_lane = relevance
                out.append(Ready(relevance, head.retry.not_before))
        return out

    def _withhold(self, out: list[Effect], error: DispatcherClosed) -> None:
        """Every call not on the wire (a read-back that waits for its grant too) resolves with
        ``error``; the request in flight, if any, finishes and reports as usual."""
        reading = self._reading_back()
        if reading is not None:
            self.inflight = None
            out.append(Resolve(reading.future, reading.call.call_type, error))
        if self.queue:
            out.extend(Resolve(e.future, e.call.call_type, error) for e in self.queue)
            self.queue = []

    def _reading_back(self) -> Entry | None:
        """The call in flight whose retries ran out with a request unanswered while its
        read-back waits for a grant (no request on the wire), if any. Such a call is not
        pending: nothing merges with it or supersedes it, and calls that arrive meanwhile
        queue behind it as behind any call in flight; but it is not on the wire either, so
        whatever withdraws pending calls (a cancellation, the loss of leadership, the object
        gone) withdraws it too."""
        inflight = self.inflight
        return inflight if inflight is not None and self.request is None else None

    # ------------------------------------------------------------------ lifecycle

    def _transition(self, event: Input) -> None:
        """Take the next life from :data:`LIFECYCLE`, then the state-triggered rule."""
        life = LIFECYCLE.get((self.life, event), self.life)
        if life is _RETIRING and self.inflight is None:
            life = _RETIRED
        self.life = life

    def _retire(self, out: list[Effect], event: Input, why: str) -> None:
        """The object is gone: cancel what waits (a pending deletion succeeded), a read-back
        that waits for its grant included, and retire."""
        waiting = self.queue
        reading = self._reading_back()
        if reading is not None:
            self.inflight = None
            waiting = [reading, *waiting]
        for entry in waiting:
            self._gone(out, entry, why)
        self.queue = []
        self._transition(event)
        out.append(Retire(tombstone=True, final=self.life is _RETIRED))

    def _gone(self, out: list[Effect], entry: Entry, why: str) -> None:
        """``entry`` ends unsent, its object gone (:func:`~.effects.when_gone`): a deletion got
        its way, anything else is cancelled for ``why``."""
        call = entry.call
        cancelled = CallCancelled(about(call.ref, why), uid=self.uid, call_type=call.call_type)
        out.append(Resolve(entry.future, call.call_type, when_gone(call, cancelled)))

    def _fail(
        self,
        out: list[Effect],
        entry: Entry,
        exc_type: type[CallOutcomeError],
        why: str,
        call_type: str | None = None,
    ) -> None:
        call = entry.call
        ctype = call_type if call_type is not None else call.call_type
        error = exc_type(about(call.ref, why), uid=self.uid, call_type=ctype)
        out.append(Resolve(entry.future, ctype, error))
