"""The per-object rules as a pure machine (DESIGN §3): inputs in, effects out.

One :class:`ObjectState` per object UID holds what the rules need: what is known of the object
(:class:`~.knowledge.Knowledge`, its base), the pending calls in send order
(:mod:`.queue_policy`), the call in flight, and the callers' futures as opaque handles (the
machine never resolves them: it says so). Its inputs are the events of an object's life
(:meth:`~ObjectState.submit`, :meth:`~ObjectState.grant`, :meth:`~ObjectState.done`,
:meth:`~ObjectState.observed_event`, :meth:`~ObjectState.deleted`, ...); each returns the
*effects* for the actor shell (:mod:`.object_actor`) to carry out, in order: resolve a future,
tell the executor the object is ready, send a request, refund a grant, retire. Time comes in as
``now`` arguments; there are no threads, clocks or I/O here.

**The lifecycle** is the one automaton: :data:`LIFECYCLE` maps ``(life, input)`` to the next
life (a pair it lacks keeps the life), and one state-triggered rule completes it: an object
that is ``RETIRING`` with nothing in flight is ``RETIRED`` at once. ``LIVE`` objects apply the
queue rules; once the object is gone (``RETIRING``: deleted while a request is on the wire;
``RETIRED``: for good) a submit is refused (``CallCancelled``), a grant is refunded, a done
ends the last request, and the rest changes nothing. Whether calls wait or one is in flight is
not a state of its own: it is a view of the queue (:attr:`ObjectState.state`).

**Rules applied once.** Each input judges a call once: a call that passed elision and
staleness against the observed object (with nothing in flight) is not judged again until the
object changes (``Entry.judged``).

**Withdrawing one call** (``withdraw(future)``; ``cancel`` withdraws by call type): a pending
call resolves ``CallCancelled`` at once; a call in flight cannot be recalled, but when its
request ends retryably (429, 5xx, a lost reply) or with a 409 it resolves ``CallCancelled``
instead of going back to the queue (a success still resolves ``SUCCESS``: it landed). An entry
that carries someone else's intent too is sent whole (see :mod:`.queue_policy`).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from .calls import Call
from .config import RetryConfig
from .errors import (
    ApiError,
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
from .knowledge import Knowledge
from .objects import Obj, ObjectRef
from .queue_policy import (
    FRESH,
    NO_HOLDS,
    SENT_ONCE,
    Entry,
    RetryState,
    exclusive_tracked,
    place,
    superseded_by,
)

__all__ = [
    "LIFECYCLE",
    "NO_HOLDS",
    "Done",
    "Effect",
    "Input",
    "InvalidTransition",
    "Life",
    "Merged",
    "ObjectState",
    "Ready",
    "Rebased",
    "Refund",
    "Resolve",
    "Result",
    "Retire",
    "RetryState",
    "Send",
    "State",
    "about",
    "dependency_failed",
    "lifecycle_markdown",
]


class InvalidTransition(RuntimeError):
    """An input the machine cannot take now (a ``done`` with nothing in flight): a bug in the
    shell or the executor."""


# --------------------------------------------------------------------------- the lifecycle


class Life(enum.Enum):
    """Whether the object lives."""

    LIVE = "live"
    RETIRING = "retiring"  # gone; the request in flight has yet to end
    RETIRED = "retired"  # gone for good; the actor leaves

    __hash__ = object.__hash__  # singletons: identity hashing for the table lookups


class State(enum.Enum):
    """The coarse state of one object (:attr:`ObjectState.state`): not a machine of its own
    but a view of the life and the queue, for logs and tests."""

    IDLE = "idle"
    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    IN_FLIGHT_PENDING = "in_flight_pending"
    RETIRING = "retiring"
    RETIRED = "retired"


class Input(enum.Enum):
    """The machine's inputs."""

    SUBMIT = "submit"
    GRANT = "grant"
    DONE = "done"
    GONE = "gone"  # a request found the object gone (404) or deleted it
    OBSERVED = "observed"
    DELETED = "deleted"
    CANCEL = "cancel"
    WITHDRAW = "withdraw"
    CLOSE = "close"
    REVOKE = "revoke"
    RELEASE = "release"
    DEPENDENCY_FAILED = "dependency_failed"

    __hash__ = object.__hash__


_LIVE, _RETIRING, _RETIRED = Life.LIVE, Life.RETIRING, Life.RETIRED

LIFECYCLE: Final[dict[tuple[Life, Input], Life]] = {
    (_LIVE, Input.DELETED): _RETIRING,  # informer delete (or a synthetic one)
    (_LIVE, Input.GONE): _RETIRING,  # 404, or a deletion of ours succeeded
    (_LIVE, Input.CLOSE): _RETIRED,  # dispatcher shutdown: everything resolves
    (_RETIRING, Input.DONE): _RETIRED,  # the last request ended
    (_RETIRING, Input.CLOSE): _RETIRED,
}
"""Event-triggered lifecycle transitions, keyed by input; every other pair keeps the life.
State-triggered: ``RETIRING`` with nothing in flight is ``RETIRED`` at once."""


def lifecycle_markdown() -> str:
    """:data:`LIFECYCLE` as a Markdown table (docs/behaviour.md shows it; a test keeps the two
    in step): one row per input that moves the life, one column per life, the next life in
    each cell (blank: the input keeps the life)."""
    lives = list(Life)
    inputs = [i for i in Input if any((life, i) in LIFECYCLE for life in lives)]
    lines = [
        "| input \\ life | " + " | ".join(f"`{life.value}`" for life in lives) + " |",
        "|---" * (len(lives) + 1) + "|",
    ]
    for inp in inputs:
        cells = [LIFECYCLE.get((life, inp)) for life in lives]
        row = " | ".join("" if c is None else f"`{c.value}`" for c in cells)
        lines.append(f"| `{inp.value}` | {row} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- effects
# The effects made for every call (and ``Done``) are named tuples: immutable, equal by value,
# and built on the hot paths with ``tuple.__new__(Kind, fields)``, a C call, where a class's
# own ``__init__`` or a named tuple's ``__new__`` runs Python code per object (``_new``).

_new: Final = tuple.__new__


class Resolve(NamedTuple):
    """Resolve ``future`` (exactly once) with ``outcome``. An ``OVERWRITTEN`` outcome names the
    ``successor``: the future of the newer call that carries the intent on."""

    future: Any
    call_type: str
    outcome: Outcome | CallOutcomeError | DispatcherClosed
    successor: Any = None


class Ready(NamedTuple):
    """The object has something to send in lane ``relevance``, not before ``not_before``."""

    relevance: int
    not_before: float


class Send(NamedTuple):
    """Answer to a grant: perform ``call`` against ``obj``; with ``read``, only re-read the
    object (one GET) so the call can be computed against a trusted object; with ``verify``
    too, the read is the last one of a call whose last requests went unanswered: the object
    comes back as read (whatever its UID), for :meth:`~.calls.Call.landed` to judge."""

    call: Call
    obj: Obj | None
    attempt: int
    read: bool = False
    verify: bool = False


@dataclass(frozen=True, slots=True)
class Refund:
    """Answer to a grant: nothing to send now; give the token and the slot back."""


@dataclass(frozen=True, slots=True)
class Retire:
    """The object is gone (or the dispatcher closes): tombstone the UID with ``tombstone``;
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


class Result(enum.Enum):
    """How a request ended, as the executor classified it."""

    SUCCESS = "success"
    RETRY = "retry"  # retryable error: try again after ``delay`` (within the budget)
    CONFLICT = "conflict"  # 409; ``obj`` is the one re-read (None if that read failed)
    NOT_FOUND = "not_found"
    FAILED = "failed"  # permanent

    __hash__ = object.__hash__


class Done(NamedTuple):
    """The end of the request in flight, as the executor classified it."""

    call: Call
    result: Result
    obj: Obj | None = None
    error: BaseException | None = None
    delay: float = 0.0


def about(ref: ObjectRef, why: str) -> str:
    """The message of an outcome error about the object ``ref`` names."""
    return f"{why}: {ref}"


def dependency_failed(call: Call, cause: BaseException) -> DependencyFailed:
    """The error of ``call``, held, when a prerequisite failed with ``cause`` (or its group
    was cancelled): it carries ``ref``, so its message starts with the object. The one
    spelling of it, whether the actor or the submitting thread resolves the call. Pure."""
    return DependencyFailed(
        f"{call.call_type} not sent: a prerequisite failed: {cause}",
        ref=call.ref,
        call_type=call.call_type,
        cause=cause,
    )


_OK: Final = Result.SUCCESS
_SKIPPED: Final = Outcome.SKIPPED
_OVERWRITTEN: Final = Outcome.OVERWRITTEN
_SUCCESS: Final = Outcome.SUCCESS
_REFUND: Final = Refund()
_UNJUDGED: Final[Any] = object()


# --------------------------------------------------------------------------- the machine


class ObjectState(Knowledge):
    """The rules of one object. Every input returns the effects to carry out, in order. Not
    thread-safe: the object's actor feeds it one input at a time."""

    __slots__ = ("inflight", "life", "queue", "ready_lane", "request", "retry")

    def __init__(self, uid: str, retry: RetryConfig) -> None:
        # Knowledge's fields, set here rather than through its __init__ (one call per spawn)
        self.uid = uid
        self.observed: Obj | None = None
        self.observed_rv: str | None = None
        self.landed: Call | None = None
        self.rv_stale = False
        self.untrusted_rv: str | None = None
        self.retry = retry
        self.life = _LIVE
        self.queue: list[Entry] = []  # pending calls in send order, one per call type
        self.inflight: Entry | None = None  # the call whose request is on the wire
        self.request: Send | None = None  # that request (the call, or the re-read before it)
        # The lane of the Ready the executor holds for this object, if any: a Ready is only
        # repeated for a more urgent head.
        self.ready_lane: int | None = None

    # ------------------------------------------------------------------ views

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

    # ------------------------------------------------------------------ inputs

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
            self._fail(out, entry, CallCancelled, "object deleted")
            return out
        basis = call.basis
        if basis is not None and basis is not self.observed:
            meta = basis.get("metadata") if self.observed is None else None
            if (
                type(meta) is dict
                and meta.get("uid") == self.uid
                and self.landed is None
                and self.untrusted_rv is None
            ):
                # a new actor's first object: observe() without what it needs no more
                rv = meta.get("resourceVersion")
                self.observed, self.observed_rv = basis, rv if type(rv) is str and rv else None
            else:
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
                    out.append(_new(Ready, (relevance, 0.0)))
                return out
        return self._ready(out)

    def grant(self, now: float) -> list[Effect]:
        """The executor reserved a token and a worker: send the head call (or the re-read it
        needs), or refund. Calls found elided, stale or failing their precheck on the way
        resolve."""
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
        out.append(_REFUND)
        return self._ready(out)

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
        elif done.result is not _OK or call.exclusive:
            self._send_done(out, entry, done, now)
        else:  # the usual end: the call's own request succeeded (see _send_done)
            obj = done.obj
            if obj is not None:
                self.observe(obj)
            else:
                self.land(call)
            out.append(_new(Resolve, (entry.future, call.call_type, _SUCCESS, None)))
            if not self.queue:
                return out  # nothing waits: nothing to ask for
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
        """A caller withdraws the pending calls (of ``call_type``, or all). A call in flight
        cannot be recalled."""
        out: list[Effect] = []
        keep: list[Entry] = []
        for entry in self.queue:
            if call_type is None or entry.call.call_type == call_type:
                self._fail(out, entry, CallCancelled, "cancelled by caller")
            else:
                keep.append(entry)
        self.queue = keep
        return self._ready(out)

    def withdraw(self, future: Any, cause: CallCancelled | None = None) -> list[Effect]:
        """A caller withdraws the call of ``future`` (and no other): every entry carrying its
        intent marks it; an entry whose intents are all withdrawn is withdrawn (pending: it
        resolves ``CallCancelled`` now; in flight: instead of a retry). ``cause``: why, when
        it is not the caller's own choice (a call group cancelled because its owner was
        deleted): the ``CallCancelled`` says so and carries it."""
        out: list[Effect] = []
        inflight = self.inflight
        if inflight is not None and inflight.carries(future):
            inflight.withdraw(future, cause)
        queue = self.queue
        for i, entry in enumerate(queue):
            if entry.carries(future):
                entry.withdraw(future, cause)
                if entry.cancelled:
                    del queue[i]
                    out.append(Resolve(entry.future, entry.call.call_type, self._withdrawn(entry)))
                break  # one pending entry per call type: at most one carries a call
        return self._ready(out)

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
        """Leadership lost: every call not on the wire resolves with ``error``; the call in
        flight finishes and reports as usual."""
        out: list[Effect] = [Resolve(e.future, e.call.call_type, error) for e in self.queue]
        self.queue = []
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
        for pending in queue:
            if pending.call.call_type in call.supersedes:
                # superseded: this call takes the first such slot and waits out its backoff
                # (nothing else of its history: it is another call)
                if slot is None:
                    slot = len(keep)
                    if pending.retry.not_before > entry.retry.not_before:
                        entry.retry = RetryState(not_before=pending.retry.not_before)
                entry.absorb(pending)
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
        """An exclusive call cancels everything pending and becomes the only pending call."""
        call = entry.call
        ctype = call.call_type
        same = None
        for other in self.queue:
            if other.call.call_type == ctype and same is None:
                same = other
            else:
                self._fail(out, other, CallCancelled, f"preempted by {ctype}", other.call.call_type)
        self.queue = []
        if same is not None:
            self._merge(out, entry, same)
        inflight = self.inflight
        if (inflight is not None and inflight.call.call_type == ctype) or self._is_noop(call):
            out.append(Resolve(entry.future, ctype, _SKIPPED))  # already on its way, or done
            return
        self.queue.append(entry)

    @staticmethod
    def _merge(out: list[Effect], entry: Entry, older: Entry) -> None:
        """The new ``entry`` absorbs the pending ``older`` one of its type."""
        ctype = entry.call.call_type
        out.append(Merged(ctype))
        entry.merge_older(older)
        out.append(Resolve(older.future, older.call.call_type, _OVERWRITTEN, entry.future))

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
        """How a pending call ends against the current object without being sent: elided
        (``SKIPPED``), stale (``CallStale``) or failing its precheck (``CallConflict``); None
        when it is still to be sent. Elision and staleness, being pure, are judged once per
        observed object (with nothing in flight, while the object is trusted for elision)."""
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

    # ------------------------------------------------------------------ sending and results

    def _send(self, entry: Entry) -> Send:
        """``entry`` goes in flight: its request, or the re-read it needs first."""
        self.inflight = entry
        call = entry.call
        retry = entry.retry
        if entry.unanswered is not None:
            send = Send(call, None, retry.attempt, True, True)
        elif call.reads_object and (
            self.untrusted_rv is not None or self.rv_stale or self.observed is None
        ):  # not trusted (Knowledge.trusted, spelled out on the hot path)
            send = Send(call, None, retry.attempt, True)
        else:
            retry = entry.retry = SENT_ONCE if retry is FRESH else retry.sent()
            entry.sent_rv = self.observed_rv
            send = _new(Send, (call, self.observed, retry.attempt, False, False))
        self.request = send
        return send

    def _send_done(self, out: list[Effect], entry: Entry, done: Done, now: float) -> None:
        """The call's own request ended."""
        call = entry.call
        result = done.result
        if result is Result.SUCCESS:
            if done.obj is not None:
                self.observe(done.obj)
            else:
                self.land(call)
            out.append(_new(Resolve, (entry.future, call.call_type, _SUCCESS, None)))
            if call.exclusive:
                self._retire(out, Input.GONE, "deleted by " + call.call_type)
        elif result is Result.NOT_FOUND:
            self._not_found(out, entry)
        elif result is Result.CONFLICT:
            self._conflict(out, entry, done)
        elif result is Result.RETRY:
            self.ambiguous(entry.sent_rv)  # the request may have been applied
            self._retry_or_fail(out, entry, done, now)
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
        """The read of a call whose retries ran out without an answer ended: the call resolves
        ``SUCCESS`` if the object shows it landed (:meth:`~.calls.Call.landed`; a deletion
        whose object is gone too), else ``CallFailed``, saying whether the object showed it
        did not land or could not be read (the outcome is then unknown)."""
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

    def _retry_or_fail(self, out: list[Effect], entry: Entry, done: Done, now: float) -> None:
        """A retryable failure: back off and go again, within the budget and attempts."""
        if entry.withdrawn is not None and entry.cancelled:
            out.append(
                Resolve(entry.future, entry.call.call_type, self._withdrawn(entry, in_flight=True))
            )
            return
        config = self.retry
        retry = entry.retry
        deadline = retry.deadline if retry.deadline is not None else now + config.budget
        at = now + done.delay
        retry = entry.retry = retry.failed(at, deadline)
        attempts = config.max_attempts
        if at > deadline or (attempts is not None and retry.failures >= attempts):
            call = entry.call
            why = (
                f"gave up after {retry.failures} failed requests "
                f"({config.budget:g} s retry budget): {done.error}"
            )
            last = done.error
            if retry.attempt > 0 and isinstance(last, ApiError) and last.ambiguous:
                # no answer says whether an attempt landed: read the object once first
                entry.unanswered = (why, last)
                self._requeue_front(out, entry)
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

    def _requeue_front(self, out: list[Effect], entry: Entry) -> None:
        """Put a call that was in flight back at the head, merged with what arrived meanwhile
        (a call of its type), unless a superseding or exclusive call took over. It holds
        nothing (it was sent). A call withdrawn while in flight resolves ``CallCancelled``."""
        ctype = entry.call.call_type
        if entry.withdrawn is not None and entry.cancelled:
            out.append(Resolve(entry.future, ctype, self._withdrawn(entry, in_flight=True)))
            return
        queue = self.queue
        for i, pending in enumerate(queue):
            if pending.call.exclusive:
                self._fail(out, entry, CallCancelled, "object is being deleted")
                return
            if ctype in pending.call.supersedes:
                pending.absorb(entry)
                out.append(Resolve(entry.future, ctype, _OVERWRITTEN, pending.future))
                return
            if pending.call.call_type == ctype:
                out.append(Merged(ctype))
                pending.call = pending.call.merge(entry.call)
                pending.retry = pending.retry.merged(entry.retry)
                pending.absorb(entry)
                out.append(Resolve(entry.future, ctype, _OVERWRITTEN, pending.future))
                place(queue, queue.pop(i), 0)
                return
        queue.insert(0, entry)

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

    # ------------------------------------------------------------------ lifecycle

    def _transition(self, event: Input) -> None:
        """Take the next life from :data:`LIFECYCLE`, then the state-triggered rule."""
        life = LIFECYCLE.get((self.life, event), self.life)
        if life is _RETIRING and self.inflight is None:
            life = _RETIRED
        self.life = life

    def _retire(self, out: list[Effect], event: Input, why: str) -> None:
        """The object is gone: cancel what waits (a pending deletion succeeded) and retire."""
        for entry in self.queue:
            if entry.call.exclusive:  # a pending deletion: the object is gone, as intended
                out.append(Resolve(entry.future, entry.call.call_type, _SUCCESS))
            else:
                self._fail(out, entry, CallCancelled, why)
        self.queue = []
        self._transition(event)
        out.append(Retire(tombstone=True, final=self.life is _RETIRED))

    # ------------------------------------------------------------------ helpers

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

    def _ready(self, out: list[Effect]) -> list[Effect]:
        """Ask the executor for a grant when the head call holds nothing, nothing is in flight,
        and the executor does not hold a Ready in its lane or a higher one. The one place
        that decides readiness."""
        queue = self.queue
        if queue and self.inflight is None and self.life is _LIVE:
            head = queue[0]
            if not head.holds:
                relevance = head.call.relevance
                lane = self.ready_lane
                if lane is None or relevance > lane:
                    self.ready_lane = relevance
                    out.append(Ready(relevance, head.retry.not_before))
        return out
