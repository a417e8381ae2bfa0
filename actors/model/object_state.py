"""The per-object rules as a pure machine: each input returns the effects (:mod:`.effects`)
for the actor shell to carry out, in order (docs/behaviour.md tells the rules).

Built in layers, one concept each: :mod:`.knowledge` (what is known of the object),
:mod:`.object_queue` (the queue and the rules its inputs share), :mod:`.request_ends` (the end
of a request), and here the caller's and the informer's inputs.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Final

from .calls import Call
from .effects import Effect, Ready, Refund, Resolve, Retire, dependency_failed
from .errors import CallCancelled, CallConflict, CallStale, DispatcherClosed, Outcome
from .lifecycle import Input, Life
from .objects import Obj
from .queue_policy import NO_HOLDS, Entry, exclusive_tracked, place, superseded_by
from .request_ends import RequestEnds

__all__ = ["ObjectState"]

_LIVE, _RETIRED = Life.LIVE, Life.RETIRED
_SKIPPED: Final = Outcome.SKIPPED
_OVERWRITTEN: Final = Outcome.OVERWRITTEN
_REFUND: Final = Refund()


class ObjectState(RequestEnds):
    """The rules of one object. Every input returns the effects to carry out, in order. Not
    thread-safe: the object's actor feeds it one input at a time."""

    __slots__ = ()

    def submit(
        self,
        call: Call,
        future: Any,
        holds: frozenset[Hashable] = NO_HOLDS,
        behind: frozenset[Any] = NO_HOLDS,
    ) -> list[Effect]:
        """A caller's new call: merged, superseding, skipped, stale, or queued (see
        :mod:`.queue_policy`). With ``holds`` (opaque tokens) it is admitted the same way but not
        sent before :meth:`release` removed every token; while held it is never queued ahead
        of a call carrying one of the futures in ``behind``."""
        out: list[Effect] = []
        entry = Entry(call, future, holds, behind)
        if self.life is not _LIVE:
            self._gone(out, entry, "object deleted")
            return out
        if self.revoked is not None:  # told before the revocation, handled after it
            out.append(Resolve(future, call.call_type, self.revoked))
            return out
        basis = call.basis
        if basis is not None and basis is not self.observed:
            self.observe(basis)
        if call.exclusive:
            self._preempt(out, entry)
        elif self.queue or self.inflight is not None:
            self._admit(out, entry)
        else:  # nothing pending or in flight (the usual case): stale, failing, a no-op, or it waits
            observed = self.observed
            if (reason := call.revalidate(basis, observed)) is not None:
                self._fail(out, entry, CallStale, reason)
            elif (reason := call.precheck(observed)) is not None:
                self._fail(out, entry, CallConflict, reason)
            elif self.untrusted_rv is None and call.is_noop(observed):
                out.append(Resolve(future, call.call_type, _SKIPPED))
            else:
                if self.untrusted_rv is None:
                    entry.judged = observed  # judged against this object: not again at grant
                self.queue.append(entry)
                relevance = call.relevance
                lane = self.ready_lane  # None unless a Ready outlived what it was for
                if not holds and (lane is None or relevance > lane):
                    self.ready_lane = relevance
                    out.append(Ready(relevance, 0.0))
                return out
        return self._ready(out)

    def grant(self, now: float) -> list[Effect]:
        """The executor reserved a token and a worker: send the head call (or the re-read it
        needs), or the read-back of the call in flight whose retries ran out unanswered, or
        refund. Calls found elided, stale or failing their precheck on the way resolve."""
        self.ready_lane = None
        out: list[Effect] = []
        if self.life is _LIVE and self.inflight is None:
            queue = self.queue
            while queue:
                entry = queue[0]
                if entry.holds or entry.retry.not_before > now:
                    break  # held, or backing off (_ready asks again for its time)
                del queue[0]
                call = entry.call
                if (
                    entry.judged is self.observed  # judged against this object (the usual case)
                    and self.inflight is None
                    and self.untrusted_rv is None
                    and entry.judged is not None
                ):
                    reason = call.precheck(entry.judged)  # ... but for the precheck
                    verdict = None if reason is None else self._conflict_with(entry, reason)
                else:
                    verdict = self._judge(entry)
                if verdict is not None:
                    out.append(verdict)
                    continue
                out.append(self._send(entry))
                return out  # one in flight: nothing else is ready until it ends
        elif (
            (reading := self._reading_back()) is not None
            and self.life is _LIVE
            and reading.retry.not_before <= now
        ):
            out.append(self._send(reading))  # its read-back (Send.verify)
            return out
        out.append(_REFUND)
        return self._ready(out)

    def observed_event(self, obj: Obj) -> list[Effect]:
        """Informer add/update: a newer state of the object re-judges what waits; anything else
        (an older version, another object, a gone object) changes nothing."""
        out: list[Effect] = []
        if self.life is _LIVE and self.observe(obj):
            self._revisit(out)
            return self._ready(out)
        return out

    def deleted(self) -> list[Effect]:
        """Informer delete (or a synthetic one): cancel what waits and retire."""
        out: list[Effect] = []
        if self.life is _LIVE:
            self._retire(out, Input.DELETED, "object deleted")
        return out

    def cancel(self, call_type: str | None) -> list[Effect]:
        """A caller withdraws the pending calls (of ``call_type``, or all), and a read-back
        that waits for its grant. A call on the wire cannot be recalled."""
        out: list[Effect] = []
        reading = self._reading_back()
        if reading is not None and call_type in (None, reading.call.call_type):
            self.inflight = None
            self._fail(out, reading, CallCancelled, "cancelled by caller")
        keep: list[Entry] = []
        for entry in self.queue:
            if call_type is None or entry.call.call_type == call_type:
                self._fail(out, entry, CallCancelled, "cancelled by caller")
            else:
                keep.append(entry)
        self.queue = keep
        return self._ready(out)

    def withdraw(self, future: Any, cause: CallCancelled | None = None) -> list[Effect]:
        """A caller withdraws the call of ``future`` (and no other): an entry whose intents
        are all withdrawn resolves ``CallCancelled`` (pending: now; in flight: instead of a
        retry), carrying ``cause`` when it is not the caller's own choice (a group's)."""
        out: list[Effect] = []
        inflight = self.inflight
        if inflight is not None and inflight.carries(future):
            inflight.withdraw(future, cause)
            if self.request is None and inflight.cancelled:  # its read-back had not gone out
                self.inflight = None
                withdrawn = self._withdrawn(inflight, in_flight=True)
                out.append(Resolve(inflight.future, inflight.call.call_type, withdrawn))
        queue = self.queue
        for i, entry in enumerate(queue):
            if entry.carries(future):
                entry.withdraw(future, cause)
                if entry.cancelled:
                    del queue[i]
                    out.append(Resolve(entry.future, entry.call.call_type, self._withdrawn(entry)))
                break  # one pending entry per call type: at most one carries a call
        return self._ready(out)

    def close(self) -> list[Effect]:
        """Dispatcher shutdown: everything resolves ``DispatcherClosed``; retire."""
        out: list[Effect] = []
        if self.life is _RETIRED:
            return out
        closed = DispatcherClosed("dispatcher stopped before the call completed")
        entries = [*self.queue, *([self.inflight] if self.inflight is not None else [])]
        for entry in entries:
            out.append(Resolve(entry.future, entry.call.call_type, closed))
        self.queue = []
        self.inflight = self.request = None
        self._transition(Input.CLOSE)
        out.append(Retire(tombstone=False, final=True))
        return out

    def revoke(self, error: DispatcherClosed) -> list[Effect]:
        """Leadership lost: every call not on the wire resolves with ``error`` (a read-back
        that waits for its grant too), now and from now on: one the request in flight puts
        back (to retry it, or rebased after a 409) and one submitted later. The request in
        flight finishes and reports as usual."""
        self.revoked = error
        out: list[Effect] = []
        self._withhold(out, error)
        return out

    def release(self, token: Hashable) -> list[Effect]:
        """A prerequisite succeeded: no call holds ``token`` any more; a head call left with no
        holds becomes sendable."""
        for entry in self.queue:
            entry.release(token)
        return self._ready([])

    def dependency_failed(self, token: Hashable, cause: BaseException) -> list[Effect]:
        """A prerequisite failed (or was cancelled): every call holding ``token`` resolves
        :class:`~.errors.DependencyFailed` with ``cause`` and leaves the queue unsent."""
        out: list[Effect] = []
        keep: list[Entry] = []
        for entry in self.queue:
            if token in entry.holds:
                call = entry.call
                out.append(Resolve(entry.future, call.call_type, dependency_failed(call, cause)))
            else:
                keep.append(entry)
        self.queue = keep
        return self._ready(out)

    # ------------------------------------------------------------------ submit rules

    def _admit(self, out: list[Effect], entry: Entry) -> None:
        """A call that does not preempt, while others are tracked (see :mod:`.queue_policy`)."""
        call = entry.call
        ctype = call.call_type
        queue, inflight = self.queue, self.inflight
        if exclusive_tracked(queue, inflight):
            self._fail(out, entry, CallCancelled, "object is being deleted")
            return
        observed = self.observed
        if (reason := call.revalidate(call.basis, observed)) is not None:
            self._fail(out, entry, CallStale, reason)
            return
        if (reason := call.precheck(observed)) is not None:
            self._fail(out, entry, CallConflict, reason)
            return
        if superseded_by(call, queue, inflight):
            out.append(Resolve(entry.future, ctype, _SKIPPED))
            return
        for i, pending in enumerate(queue):
            if pending.call.call_type == ctype:
                self._merge(out, entry, pending)
                if self._is_noop(entry.call):
                    del queue[i]
                    out.append(Resolve(entry.future, ctype, _SKIPPED))
                elif entry.holds and entry.behind:
                    del queue[i]
                    place(queue, entry, i)
                else:
                    queue[i] = entry
                return
        if self._is_noop(call):
            out.append(Resolve(entry.future, ctype, _SKIPPED))
            return
        slot: int | None = None
        keep: list[Entry] = []
        behind = entry.behind if entry.holds else NO_HOLDS
        for pending in queue:
            if pending.call.call_type in call.supersedes and not (
                behind and pending.carries_any(behind)
            ):  # a call this one waits for is never replaced: it queues ahead
                # superseded: this call takes the first such slot
                if slot is None:
                    slot = len(keep)
                entry.supersede(pending)
                out.append(
                    Resolve(pending.future, pending.call.call_type, _OVERWRITTEN, entry.future)
                )
            else:
                keep.append(pending)
        if slot is None:
            keep.append(entry)
        else:
            place(keep, entry, slot)
        self.queue = keep

    def _preempt(self, out: list[Effect], entry: Entry) -> None:
        """An exclusive call cancels everything pending and becomes the only pending call; it
        waits out the backoff of the calls it replaces, as a superseding call does."""
        call = entry.call
        ctype = call.call_type
        same = None
        for other in self.queue:
            if other.call.call_type == ctype and same is None:
                same = other
            else:
                entry.retry = entry.retry.waiting_until(other.retry.not_before)
                self._fail(out, other, CallCancelled, f"preempted by {ctype}", other.call.call_type)
        self.queue = []
        if same is not None:
            self._merge(out, entry, same)
        if self._is_noop(call):
            out.append(Resolve(entry.future, ctype, _SKIPPED))  # done already
            return
        # behind a deletion of its type in flight too: sent if that one fails, SUCCESS if the
        # object goes (a pending deletion got its way)
        self.queue.append(entry)
