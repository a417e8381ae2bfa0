"""The per-object rules as a pure state machine (DESIGN §3).

One :class:`ObjectState` per object UID holds everything the rules need: the newest trusted
object, the queue of pending calls (at most one per call type, in order), the call in flight,
and the callers' futures (as opaque handles: the machine never resolves them, it says so).
Its inputs are the events of an object's life; its outputs are *effects* that the actor shell
(:mod:`.object_actor`) carries out. It knows nothing about threads, pykka, clocks or the
apiserver: time comes in as ``now`` arguments, randomness is the executor's.

States (:class:`State`), derived after every event from what is tracked:

==================  ==================================================================
``IDLE``            nothing pending, nothing in flight (the actor may be reaped)
``PENDING``         calls wait; none is in flight
``IN_FLIGHT``       one request (a call, or the re-read before it) is on its way
``IN_FLIGHT_PEND``  one is on its way and others wait behind it
``RETIRING``        the object is gone: nothing is accepted; waits for the call in flight
``RETIRED``         nothing left: the actor leaves the registry (terminal)
==================  ==================================================================

Events and the effects they may produce (:data:`TRANSITIONS` lists, per state, the events it
accepts; anything else is an :class:`InvalidTransition`, as a bug):

* ``submit(call, future)`` — merge, supersede, skip, cancel, queue (``Resolve``, ``Ready``);
* ``grant(now)`` — the executor reserved a token and a worker: the head call (or the re-read
  it needs) goes in flight (``Send``), or nothing is sendable (``Refund``);
* ``done(...)`` — the request in flight ended (``Resolve``, ``Ready``, ``Retire``);
* ``observed(obj)`` — an informer update: rebase, elide, re-validate (``Resolve``);
* ``deleted()`` — informer delete or 404: cancel what waits, retire (``Resolve``, ``Retire``);
* ``cancel(call_type)`` — a caller withdraws pending calls (``Resolve``);
* ``close()`` — dispatcher shutdown (``Resolve``, ``Retire``);
* ``revoke(error)`` — leadership lost: everything not on the wire resolves with ``error``;
* ``release(token)`` — a prerequisite succeeded: calls held on ``token`` lose that hold
  (``Ready`` once the head call holds nothing);
* ``dependency_failed(token, cause)`` — a prerequisite failed: calls held on ``token`` resolve
  :class:`~.errors.DependencyFailed` and are never sent (``Resolve``, ``Ready``).

Held calls (DESIGN §3 "Call groups across objects"): ``submit(call, future, holds)`` admits a
call at once (merge, supersession, staleness, elision and preemption as usual) but does not send
it while it holds any token; one object's calls go in order, so calls behind a held head wait
too. A held call asks for no grant (no token, no worker, no lane). A merged entry holds the
union of both entries' holds; a call put back after a retry or a 409 holds nothing (it was
sent, so its prerequisites had succeeded).

Preemption is ``submit`` of an *exclusive* call: it cancels every pending call and becomes
the only one.

Trust: after an ambiguous failure (the request may or may not have been applied), after a
landed request whose reply carried no object (a binding), or after a 409 whose re-read failed,
the observed object is *not trusted*: no-op elision pauses and a call whose request depends on
the object (``Call.reads_object``) re-reads it first, as a request of its own, unless a newer
object arrives meanwhile.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final

from .calls import Call
from .config import RetryConfig
from .errors import (
    CallCancelled,
    CallConflict,
    CallFailed,
    CallOutcomeError,
    CallStale,
    DependencyFailed,
    DispatcherClosed,
    ObjectNotFound,
    Outcome,
)
from .objects import Obj, get_path, is_newer, resource_version

__all__ = [
    "NO_HOLDS",
    "TRANSITIONS",
    "Done",
    "Effect",
    "InvalidTransition",
    "ObjectState",
    "Ready",
    "Rebased",
    "Refund",
    "Resolve",
    "Result",
    "Retire",
    "Send",
    "State",
]


class State(enum.Enum):
    """Named states of one object (see the module docstring)."""

    IDLE = "idle"
    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    IN_FLIGHT_PENDING = "in_flight_pending"
    RETIRING = "retiring"
    RETIRED = "retired"

    # Members are singletons: identity hashing (C) instead of Enum's hash of the name (Python),
    # for the TRANSITIONS lookup on every event.
    __hash__ = object.__hash__


class Result(enum.Enum):
    """How a request ended, as classified by the executor worker."""

    SUCCESS = "success"
    RETRY = "retry"  # retryable error: try again after ``delay`` (within the budget)
    CONFLICT = "conflict"  # 409; ``obj`` is the one re-read (None if that read failed)
    NOT_FOUND = "not_found"
    FAILED = "failed"  # permanent

    __hash__ = object.__hash__  # singletons: see State


class InvalidTransition(RuntimeError):
    """An event the current state does not accept: a bug in the shell or the executor."""


_ALL: Final = frozenset(
    {"submit", "observed", "deleted", "cancel", "close", "revoke", "release", "dependency_failed"}
)
TRANSITIONS: Final[dict[State, frozenset[str]]] = {
    State.IDLE: _ALL | {"grant"},
    State.PENDING: _ALL | {"grant"},
    State.IN_FLIGHT: _ALL | {"grant", "done"},
    State.IN_FLIGHT_PENDING: _ALL | {"grant", "done"},
    State.RETIRING: _ALL | {"grant", "done"},
    State.RETIRED: _ALL | {"grant"},
}
"""Events accepted per state. ``grant`` is accepted everywhere (a grant may race with any
change and is then refunded); ``done`` only while something is in flight."""


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class Resolve:
    """Resolve ``future`` (exactly once) with ``outcome``."""

    future: Any
    call_type: str
    outcome: Outcome | CallOutcomeError | DispatcherClosed


@dataclass(frozen=True, slots=True)
class Ready:
    """Tell the executor this object has something to send in lane ``relevance``, not before
    ``not_before`` (the shell's clock)."""

    relevance: int
    not_before: float


@dataclass(frozen=True, slots=True)
class Send:
    """Answer to a grant: perform ``call`` against ``obj``; with ``read``, only re-read the
    object (one GET) so the call can be computed against a trusted object."""

    call: Call
    obj: Obj | None
    attempt: int
    read: bool = False


@dataclass(frozen=True, slots=True)
class Refund:
    """Answer to a grant: nothing to send now; give the token and the slot back."""


@dataclass(frozen=True, slots=True)
class Retire:
    """The object is gone (or the dispatcher closes): tombstone the UID with ``tombstone``,
    leave the registry and stop once ``final``."""

    tombstone: bool
    final: bool


@dataclass(frozen=True, slots=True)
class Merged:
    """Metrics: two calls of ``call_type`` merged into one."""

    call_type: str


@dataclass(frozen=True, slots=True)
class Rebased:
    """Metrics: a call is retried after a 409, on the re-read object."""

    call_type: str


Effect = Resolve | Ready | Send | Refund | Retire | Merged | Rebased


@dataclass(frozen=True, slots=True)
class Done:
    """The end of the request in flight, as the executor classified it."""

    call: Call
    result: Result
    obj: Obj | None = None
    error: BaseException | None = None
    delay: float = 0.0


# --------------------------------------------------------------------------- entries


_UNJUDGED: Final[Any] = object()

NO_HOLDS: Final[frozenset[Hashable]] = frozenset()
"""The holds of a call that waits for nothing (shared: most calls)."""


class _Entry:
    """A tracked call and its caller's future."""

    __slots__ = (
        "attempt",
        "call",
        "conflicts",
        "deadline",
        "failures",
        "future",
        "holds",
        "judged_obs",
        "judged_trust",
        "not_before",
        "sent_rv",
    )

    def __init__(self, call: Call, future: Any, holds: frozenset[Hashable] = NO_HOLDS) -> None:
        self.call = call
        self.future = future
        self.holds = holds  # prerequisite tokens not released yet: not sendable while any
        self.attempt = 0  # requests of this call already sent (re-reads not counted)
        self.conflicts = 0  # 409s already rebased on
        self.failures = 0  # retryable failures (sends and re-reads)
        self.not_before = 0.0  # backoff after a retryable failure
        self.deadline: float | None = None  # end of the retry budget (from the first failure)
        self.sent_rv: str | None = None  # resourceVersion the last attempt was computed on
        # The observed object (by identity) and trust this call last passed _judge against
        # with nothing in flight: elision and staleness cannot differ until one changes.
        self.judged_obs: Any = _UNJUDGED
        self.judged_trust = False


_SKIPPED: Final = Outcome.SKIPPED
_OVERWRITTEN: Final = Outcome.OVERWRITTEN
_SUCCESS: Final = Outcome.SUCCESS


class ObjectState:
    """The rules of one object. Every method is an event; it returns the effects to carry out,
    in order. Not thread-safe: the object's actor feeds it one event at a time."""

    __slots__ = (
        "_inflight_read",
        "gone",
        "inflight",
        "landed",
        "observed",
        "queue",
        "ready_lane",
        "retry",
        "rv_stale",
        "state",
        "trusted",
        "uid",
        "untrusted_rv",
    )

    def __init__(self, uid: str, retry: RetryConfig) -> None:
        self.uid = uid
        self.retry = retry
        self.state = State.IDLE
        self.observed: Obj | None = None
        self.queue: list[_Entry] = []  # pending calls in send order, one per call type
        self.inflight: _Entry | None = None
        self._inflight_read = False  # the request in flight is the re-read before the call
        self.gone = False
        self.ready_lane: int | None = None  # lane of the Ready the executor holds, if any
        # Trust (module docstring): while False, no-op elision pauses and object-dependent
        # calls re-read first. ``untrusted_rv``: any observed object newer than this restores
        # trust (with preconditions, a newer state either holds that request or proves it was
        # never applied).
        self.trusted = True
        self.untrusted_rv: str | None = None
        # The observed content is right but the server's resourceVersion moved on (a request
        # landed without a reply object): object-dependent calls re-read before sending.
        self.rv_stale = False
        self.landed: Call | None = None  # landed without a reply object, not yet observed

    # ------------------------------------------------------------------ queries

    @property
    def idle(self) -> bool:
        """Nothing pending or in flight and the object not gone: the actor may be reaped."""
        return self.state is State.IDLE

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
        """The futures of every tracked call (crash handling)."""
        entries = [*self.queue, *([self.inflight] if self.inflight is not None else [])]
        return [e.future for e in entries]

    # ------------------------------------------------------------------ events

    def submit(
        self, call: Call, future: Any, holds: frozenset[Hashable] = NO_HOLDS
    ) -> list[Effect]:
        """A caller's new call. Exclusive calls preempt; others merge, supersede, are skipped,
        or queue behind what is pending. With ``holds`` (opaque tokens), the call is admitted
        the same way but not sent before :meth:`release` removed every token."""
        self._check("submit")
        out: list[Effect] = []
        entry = _Entry(call, future, holds)
        if self.gone:
            self._fail(out, entry, CallCancelled, "object deleted")
            return out
        if call.basis is not None:
            self._observe(call.basis)
        if call.exclusive:
            self._preempt(out, entry)
        else:
            self._submit(out, entry)
        return self._settle(out)

    def grant(self, now: float) -> list[Effect]:
        """The executor reserved a token and a worker: send the head call (or its re-read), or
        refund. Calls found elided, stale or failing their precheck on the way resolve."""
        self._check("grant")
        out: list[Effect] = []
        self.ready_lane = None
        send: Send | None = None
        while self.queue and self.inflight is None and not self.gone:
            entry = self.queue[0]
            if entry.holds or entry.not_before > now:
                break  # held, or backing off (_settle sends a delayed Ready)
            call = entry.call
            self.queue.pop(0)
            verdict = self._judge(entry)
            if verdict is not None:
                out.append(verdict)
                continue
            self.inflight = entry
            if call.reads_object and (not self.trusted or self.rv_stale or self.observed is None):
                self._inflight_read = True
                send = Send(call, None, entry.attempt, read=True)
            else:
                entry.attempt += 1
                entry.sent_rv = resource_version(self.observed)
                send = Send(call, self.observed, entry.attempt)
            break
        out.append(send if send is not None else Refund())
        return self._settle(out)

    def done(self, done: Done, now: float) -> list[Effect]:
        """The request in flight ended. ``now`` is the shell's clock (for backoff and budget)."""
        self._check("done")
        entry = self.inflight
        out: list[Effect] = []
        if entry is None or entry.call is not done.call:
            raise InvalidTransition(f"done for {done.call.describe()} which is not in flight")
        self.inflight = None
        was_read, self._inflight_read = self._inflight_read, False
        if was_read:
            self._read_done(out, entry, done, now)
        else:
            self._send_done(out, entry, done, now)
        return self._settle(out)

    def observed_event(self, obj: Obj) -> list[Effect]:
        """Informer add/update. An object that is not a newer state of this one is ignored."""
        self._check("observed")
        out: list[Effect] = []
        if not self._accepts(obj):
            return out
        self._adopt(obj)
        self._revisit(out)
        return self._settle(out)

    def deleted(self) -> list[Effect]:
        """Informer delete (or a synthetic one): cancel what waits and retire."""
        self._check("deleted")
        out: list[Effect] = []
        self._retire(out, "object deleted")
        return self._settle(out)

    def cancel(self, call_type: str | None) -> list[Effect]:
        """A caller withdraws the pending calls (of ``call_type``, or all). A call in flight
        cannot be recalled."""
        self._check("cancel")
        out: list[Effect] = []
        keep: list[_Entry] = []
        for entry in self.queue:
            if call_type is None or entry.call.call_type == call_type:
                self._fail(out, entry, CallCancelled, "cancelled by caller")
            else:
                keep.append(entry)
        self.queue = keep
        return self._settle(out)

    def close(self) -> list[Effect]:
        """Dispatcher shutdown: resolve everything with ``DispatcherClosed`` and retire."""
        self._check("close")
        out: list[Effect] = []
        closed = DispatcherClosed("dispatcher stopped before the call completed")
        self._drop_all(out, closed)
        self.gone = True
        out.append(Retire(tombstone=False, final=True))
        self.state = State.RETIRED
        return out

    def revoke(self, error: DispatcherClosed) -> list[Effect]:
        """Leadership lost: every call not on the wire resolves with ``error``; the call in
        flight (if any) finishes and reports as usual."""
        self._check("revoke")
        out: list[Effect] = []
        for entry in self.queue:
            out.append(Resolve(entry.future, entry.call.call_type, error))
        self.queue = []
        return self._settle(out)

    def release(self, token: Hashable) -> list[Effect]:
        """A prerequisite succeeded: no call holds ``token`` any more; a head call left with
        no holds becomes sendable."""
        self._check("release")
        for entry in self.queue:
            holds = entry.holds
            if token in holds:
                entry.holds = holds - {token}
        return self._settle([])

    def dependency_failed(self, token: Hashable, cause: BaseException) -> list[Effect]:
        """A prerequisite failed (or was cancelled): every call holding ``token`` resolves
        :class:`~.errors.DependencyFailed` with ``cause`` and leaves the queue unsent."""
        self._check("dependency_failed")
        out: list[Effect] = []
        keep: list[_Entry] = []
        for entry in self.queue:
            if token in entry.holds:
                call = entry.call
                ctype = call.call_type
                error = DependencyFailed(
                    f"{call.describe()} not sent: a prerequisite failed: {cause}",
                    uid=self.uid,
                    call_type=ctype,
                    cause=cause,
                )
                out.append(Resolve(entry.future, ctype, error))
            else:
                keep.append(entry)
        self.queue = keep
        return self._settle(out)

    # ------------------------------------------------------------------ submit rules

    def _preempt(self, out: list[Effect], entry: _Entry) -> None:
        """An exclusive call cancels everything pending and becomes the only pending call."""
        call = entry.call
        same = next((e for e in self.queue if e.call.call_type == call.call_type), None)
        for other in self.queue:
            if other is same:
                continue
            self._fail(
                out, other, CallCancelled, f"preempted by {call.call_type}", other.call.call_type
            )
        self.queue = []
        if same is not None:
            out.append(Merged(call.call_type))
            entry.call = call.merge(same.call)
            self._inherit(entry, same)
            if same.holds:
                entry.holds = entry.holds | same.holds
            out.append(Resolve(same.future, same.call.call_type, _OVERWRITTEN))
        inflight = self.inflight
        if inflight is not None and inflight.call.call_type == call.call_type:
            out.append(Resolve(entry.future, call.call_type, _SKIPPED))  # already on its way
            return
        if self._is_noop(entry.call):
            out.append(Resolve(entry.future, call.call_type, _SKIPPED))
            return
        self.queue.append(entry)

    def _submit(self, out: list[Effect], entry: _Entry) -> None:
        call = entry.call
        ctype = call.call_type
        tracked = self._tracked()
        if any(e.call.exclusive for e in tracked):
            self._fail(out, entry, CallCancelled, "object is being deleted")
            return
        if (reason := call.revalidate(call.basis, self.observed)) is not None:
            self._fail(out, entry, CallStale, reason)
            return
        if (reason := call.precheck(self.observed)) is not None:
            self._fail(out, entry, CallConflict, reason)
            return
        if any(ctype in e.call.supersedes for e in tracked):
            out.append(Resolve(entry.future, ctype, _SKIPPED))  # a superseding call is tracked
            return
        queue = self.queue
        for i, pending in enumerate(queue):
            if pending.call.call_type == ctype:
                # same type: the newer values win, the older call fills the gaps
                out.append(Merged(ctype))
                entry.call = call.merge(pending.call)
                self._inherit(entry, pending)
                if pending.holds:
                    entry.holds = entry.holds | pending.holds
                out.append(Resolve(pending.future, ctype, _OVERWRITTEN))
                if self._is_noop(entry.call):
                    del queue[i]
                    out.append(Resolve(entry.future, ctype, _SKIPPED))
                else:
                    queue[i] = entry
                return
        if self._is_noop(call):
            out.append(Resolve(entry.future, ctype, _SKIPPED))
            return
        if self.inflight is None:  # it passed every check of _judge just now
            self._judged(entry)
        slot: int | None = None
        keep: list[_Entry] = []
        for pending in queue:
            if pending.call.call_type in call.supersedes:
                # superseded: this call takes the first such slot (and its backoff)
                if slot is None:
                    slot = len(keep)
                    entry.not_before = max(entry.not_before, pending.not_before)
                out.append(Resolve(pending.future, pending.call.call_type, _OVERWRITTEN))
            else:
                keep.append(pending)
        if slot is None:
            keep.append(entry)
        else:
            keep.insert(slot, entry)
        self.queue = keep

    @staticmethod
    def _inherit(entry: _Entry, older: _Entry) -> None:
        """A merged call keeps the older entry's retry state (a merge never resets backoff)."""
        entry.attempt, entry.conflicts = older.attempt, older.conflicts
        entry.not_before, entry.deadline = older.not_before, older.deadline
        entry.failures = older.failures

    # ------------------------------------------------------------------ done rules

    def _read_done(self, out: list[Effect], entry: _Entry, done: Done, now: float) -> None:
        """The re-read before ``entry`` ended: adopt the object and put the call back first."""
        result = done.result
        if self.gone and result is not Result.NOT_FOUND:
            # deleted while the re-read was on its way: nothing left to send; a deletion got
            # its way
            if entry.call.exclusive:
                out.append(Resolve(entry.future, entry.call.call_type, _SUCCESS))
            else:
                self._fail(out, entry, CallCancelled, "object deleted")
        elif result is Result.SUCCESS and done.obj is not None:
            self._adopt_fresh(done.obj)
            self._requeue_front(out, entry)
            self._revisit(out)
        elif result is Result.NOT_FOUND:
            self._resolve_not_found(out, entry)
        elif result is Result.RETRY or (result is Result.SUCCESS and done.obj is None):
            self._retry_or_fail(out, entry, done, now)
        else:
            self._failed(out, entry, done)
        self._finish_if_gone(out)

    def _send_done(self, out: list[Effect], entry: _Entry, done: Done, now: float) -> None:
        call = entry.call
        result = done.result
        if result is Result.SUCCESS:
            if done.obj is not None:
                self._observe(done.obj)
            elif self.observed is not None:
                # no object in the reply (a binding): the server now holds this call, at a
                # resourceVersion not known yet
                self.observed = call.apply(self.observed)
                self.landed = call
                self.rv_stale = True
            out.append(Resolve(entry.future, call.call_type, _SUCCESS))
            if call.exclusive:
                self._retire(out, "deleted by " + call.call_type)
        elif result is Result.NOT_FOUND:
            self._resolve_not_found(out, entry)
        elif self.gone and result in (Result.CONFLICT, Result.RETRY):
            # deleted while in flight: nothing left to retry against; a deletion got its way
            if call.exclusive:
                out.append(Resolve(entry.future, call.call_type, _SUCCESS))
            else:
                self._fail(out, entry, CallCancelled, "object deleted")
        elif result is Result.CONFLICT:
            fresh = done.obj
            if fresh is not None:
                self._adopt_fresh(fresh)
                if call.landed_despite_conflict(fresh):
                    out.append(Resolve(entry.future, call.call_type, _SUCCESS))
                    self._revisit(out)
                    self._finish_if_gone(out)
                    return
            else:
                self._distrust()  # the re-read failed: the next attempt re-reads
            entry.conflicts += 1
            if entry.conflicts > self.retry.max_conflict_retries:
                self._fail(
                    out,
                    entry,
                    CallConflict,
                    f"conflict after {entry.conflicts} re-reads: {done.error}",
                )
            else:
                out.append(Rebased(call.call_type))
                self._requeue_front(out, entry)
                self._revisit(out)
        elif result is Result.RETRY:
            # the request may have been applied: distrust what was observed before it
            if self.trusted:
                self._distrust(entry.sent_rv)
            self._retry_or_fail(out, entry, done, now)
        else:
            self._failed(out, entry, done)
        self._finish_if_gone(out)

    def _resolve_not_found(self, out: list[Effect], entry: _Entry) -> None:
        """404: a deletion that finds its object gone has done its job; anything else fails
        ``ObjectNotFound``; the object retires."""
        call = entry.call
        outcome: Outcome | CallOutcomeError = (
            _SUCCESS
            if call.exclusive
            else ObjectNotFound("object not found", uid=self.uid, call_type=call.call_type)
        )
        out.append(Resolve(entry.future, call.call_type, outcome))
        self._retire(out, "object not found")

    def _retry_or_fail(self, out: list[Effect], entry: _Entry, done: Done, now: float) -> None:
        retry = self.retry
        if entry.deadline is None:
            entry.deadline = now + retry.budget
        entry.failures += 1
        at = now + done.delay
        attempts = retry.max_attempts
        if at > entry.deadline or (attempts is not None and entry.failures >= attempts):
            self._fail_entry(
                out,
                entry,
                CallFailed(
                    f"gave up after {entry.failures} failed requests "
                    f"({retry.budget:g} s retry budget): {done.error}",
                    uid=self.uid,
                    call_type=entry.call.call_type,
                    cause=done.error,
                ),
            )
            return
        if self.trusted and entry.attempt > 0 and entry.call.is_noop(self.observed):
            # a newer object already shows the intent (the informer saw our write)
            out.append(Resolve(entry.future, entry.call.call_type, _SKIPPED))
            return
        entry.not_before = at
        self._requeue_front(out, entry)

    def _requeue_front(self, out: list[Effect], entry: _Entry) -> None:
        """Put a call that was in flight back at the head, merged with what arrived meanwhile
        (a call of the same type), unless a superseding or exclusive call took over. It holds
        nothing (it was sent); merged into a held pending call, it waits with that call."""
        ctype = entry.call.call_type
        for i, pending in enumerate(self.queue):
            if pending.call.exclusive:
                self._fail(out, entry, CallCancelled, "object is being deleted")
                return
            if ctype in pending.call.supersedes:
                out.append(Resolve(entry.future, ctype, _OVERWRITTEN))
                return
            if pending.call.call_type == ctype:
                out.append(Merged(ctype))
                pending.call = pending.call.merge(entry.call)
                pending.attempt = max(pending.attempt, entry.attempt)
                pending.conflicts = max(pending.conflicts, entry.conflicts)
                pending.failures = max(pending.failures, entry.failures)
                pending.not_before = max(pending.not_before, entry.not_before)
                if pending.deadline is None:
                    pending.deadline = entry.deadline
                out.append(Resolve(entry.future, ctype, _OVERWRITTEN))
                self.queue.insert(0, self.queue.pop(i))
                return
        self.queue.insert(0, entry)

    def _failed(self, out: list[Effect], entry: _Entry, done: Done) -> None:
        error = done.error
        if isinstance(error, DispatcherClosed):  # e.g. the send gate refused: leadership lost
            out.append(Resolve(entry.future, entry.call.call_type, error))
            return
        self._fail_entry(
            out,
            entry,
            CallFailed(
                f"{entry.call.call_type} failed: {error}",
                uid=self.uid,
                call_type=entry.call.call_type,
                cause=error,
            ),
        )

    # ------------------------------------------------------------------ observation and trust

    def _accepts(self, obj: Obj | None) -> bool:
        """Whether ``obj`` is a newer state of *this* object (same UID, strictly newer
        resourceVersion). Anything else is ignored: the current view may hold mutations
        applied on top of that version."""
        return (
            obj is not None
            and get_path(obj, "metadata", "uid") == self.uid
            and is_newer(obj, self.observed, strict=True)
        )

    def _observe(self, obj: Obj) -> None:
        if self._accepts(obj):
            self._adopt(obj)

    def _adopt(self, obj: Obj) -> None:
        """Make ``obj`` (accepted as newer) the observed state. A call known to have landed
        without a reply object stays applied on top until an observed object shows it."""
        landed = self.landed
        if landed is not None:
            if landed.is_noop(obj):
                self.landed = None
            else:
                obj = landed.apply(obj)
        self.observed = obj
        if self.landed is None:  # an older event than the landed call keeps the re-read
            self.rv_stale = False
        self._check_trust()

    def _check_trust(self) -> None:
        """Trust the observed object again once it is newer than the untrusted version."""
        rv = self.untrusted_rv
        if self.trusted or rv is None:
            return
        obj = self.observed
        if resource_version(obj) is not None and is_newer(
            obj or {}, {"metadata": {"resourceVersion": rv}}, strict=True
        ):
            self.trusted, self.untrusted_rv = True, None

    def _adopt_fresh(self, obj: Obj) -> None:
        """Adopt an object just read from the server (after a 409, or a re-read): it is
        authoritative, even at the same resourceVersion as what was observed."""
        if get_path(obj, "metadata", "uid") != self.uid:
            return
        if self.observed is None or is_newer(obj, self.observed):
            landed = self.landed
            if landed is not None and landed.is_noop(obj):
                self.landed = None
            self.observed = obj if self.landed is None else self.landed.apply(obj)
        self.trusted, self.untrusted_rv, self.rv_stale = True, None, False

    def _distrust(self, rv: str | None = None) -> None:
        """Stop trusting the observed object until one newer than ``rv`` (default: the
        observed one's) arrives or is read."""
        self.trusted = False
        self.untrusted_rv = rv if rv is not None else (resource_version(self.observed) or "")
        self._check_trust()

    def _is_noop(self, call: Call) -> bool:
        """Whether ``call`` changes nothing: it must hold against the observed object *and*
        against it with the in-flight call applied (that call may land or not). Paused while
        the observed object is not trusted."""
        if not self.trusted or not call.is_noop(self.observed):
            return False
        inflight, observed = self.inflight, self.observed
        if inflight is not None and observed is not None:
            return call.is_noop(inflight.call.apply(observed))
        return True

    def _judge(self, entry: _Entry) -> Resolve | None:
        """How a pending call ends against the current object without being sent: elided
        (``SKIPPED``), stale (``CallStale``) or failing its precheck (``CallConflict``); None
        when it is still to be sent."""
        call = entry.call
        ctype = call.call_type
        idle = self.inflight is None
        if idle and entry.judged_obs is self.observed and entry.judged_trust == self.trusted:
            pass  # elision and staleness (pure) passed against this very state already
        elif self._is_noop(call):
            return Resolve(entry.future, ctype, _SKIPPED)
        elif (reason := call.revalidate(call.basis, self.observed)) is not None:
            return Resolve(entry.future, ctype, CallStale(reason, uid=self.uid, call_type=ctype))
        if (reason := call.precheck(self.observed)) is not None:
            return Resolve(entry.future, ctype, CallConflict(reason, uid=self.uid, call_type=ctype))
        if idle:
            self._judged(entry)
        return None

    def _judged(self, entry: _Entry) -> None:
        """Remember that ``entry`` passed _judge against the current state (nothing in
        flight)."""
        entry.judged_obs = self.observed
        entry.judged_trust = self.trusted

    def _revisit(self, out: list[Effect]) -> None:
        """After the object changed: elide, re-validate and precheck every pending call."""
        keep: list[_Entry] = []
        for entry in self.queue:
            verdict = self._judge(entry)
            if verdict is None:
                keep.append(entry)
            else:
                out.append(verdict)
        self.queue = keep

    # ------------------------------------------------------------------ retiring

    def _retire(self, out: list[Effect], why: str) -> None:
        """The object is gone: cancel what waits (a pending deletion succeeded), refuse new
        calls, and leave once nothing is in flight."""
        first = not self.gone
        self.gone = True
        for entry in self.queue:
            if entry.call.exclusive:  # a pending deletion: the object is gone, as intended
                out.append(Resolve(entry.future, entry.call.call_type, _SUCCESS))
            else:
                self._fail(out, entry, CallCancelled, why)
        self.queue = []
        if first:
            out.append(Retire(tombstone=True, final=self.inflight is None))

    def _finish_if_gone(self, out: list[Effect]) -> None:
        if (
            self.gone
            and self.inflight is None
            and self.state is not State.RETIRED
            and not any(isinstance(e, Retire) and e.final for e in out)
        ):
            out.append(Retire(tombstone=False, final=True))

    def _drop_all(
        self, out: list[Effect], outcome: Outcome | CallOutcomeError | DispatcherClosed
    ) -> None:
        for entry in self.queue:
            out.append(Resolve(entry.future, entry.call.call_type, outcome))
        self.queue = []
        if self.inflight is not None:
            out.append(Resolve(self.inflight.future, self.inflight.call.call_type, outcome))
            self.inflight = None

    # ------------------------------------------------------------------ helpers

    def _tracked(self) -> list[_Entry]:
        return [*self.queue, self.inflight] if self.inflight is not None else self.queue

    def _fail(
        self,
        out: list[Effect],
        entry: _Entry,
        exc_type: type[CallOutcomeError],
        why: str,
        call_type: str | None = None,
    ) -> None:
        ctype = call_type if call_type is not None else entry.call.call_type
        out.append(Resolve(entry.future, ctype, exc_type(why, uid=self.uid, call_type=ctype)))

    def _fail_entry(self, out: list[Effect], entry: _Entry, error: CallOutcomeError) -> None:
        out.append(Resolve(entry.future, entry.call.call_type, error))

    def _check(self, event: str) -> None:
        if event not in TRANSITIONS[self.state]:
            raise InvalidTransition(f"{event} in state {self.state.value} for {self.uid}")

    def _settle(self, out: list[Effect]) -> list[Effect]:
        """Derive the state from what is tracked; ask the executor for a grant when the head
        call can be sent and the executor does not hold a Ready in its lane (or a lower one)."""
        queue, inflight = self.queue, self.inflight
        if self.state is State.RETIRED:
            return out
        if self.gone:
            final = inflight is None
            self.state = State.RETIRED if final else State.RETIRING
            return out
        if inflight is None:
            self.state = State.PENDING if queue else State.IDLE
        else:
            self.state = State.IN_FLIGHT_PENDING if queue else State.IN_FLIGHT
        if queue and inflight is None and not queue[0].holds:
            head = queue[0]
            lane = self.ready_lane
            if lane is None or head.call.relevance > lane:
                self.ready_lane = head.call.relevance
                out.append(Ready(head.call.relevance, head.not_before))
        return out
