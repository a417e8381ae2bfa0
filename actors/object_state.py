"""The per-object rules as a pure state machine (DESIGN §3), readable from two tables.

One :class:`ObjectState` per object UID holds everything the rules need: the newest observed
object, the queue of pending calls (at most one per call type, in order), the call in flight,
and the callers' futures (as opaque handles: the machine never resolves them, it says so).
Its inputs are the events of an object's life; its outputs are *effects* that the actor shell
(:mod:`.object_actor`) carries out. It knows nothing about threads, pykka, clocks or the
apiserver: time comes in as ``now`` arguments, randomness is the executor's.

**The object machine.** :data:`TABLE` maps ``(State, Event) -> State``; a pair it lacks raises
:class:`InvalidTransition` (a bug in the shell or the executor). Every input method
(``submit``, ``grant``, ``done``, ``observed_event``, ``deleted``, ``cancel``, ``withdraw``,
``close``, ``revoke``, ``release``, ``dependency_failed``) applies its rules, names what they
made of the input as one :class:`Event` (a submit that queues is ``submit/queued``, one
resolved at once is ``submit/resolved``, ...) and takes the state from the table; nothing
recomputes the state from what is tracked. :data:`TRANSITIONS` (inputs accepted per state) is
derived from the table. ``RETIRED`` is terminal and tolerates only the messages that can still
reach a retired actor (queued before it stopped): a late submit is refused (``CallCancelled``),
a late grant is refunded, the rest change nothing.

**The trust machine.** :data:`TRUST_TABLE` maps ``(Trust, TrustEvent) -> Trust``: may the
observed object be relied on for no-op elision (``TRUSTED``, ``RV_STALE``) and as the base of a
request without a re-read (``TRUSTED`` only)? An ambiguous failure (the request may or may not
have been applied) or a 409 whose re-read failed makes it ``UNTRUSTED`` until an object newer
than :attr:`ObjectState.untrusted_rv` is observed; a request that landed without a reply object
(a binding) leaves the content right but the resourceVersion behind (``RV_STALE``) until an
observed object shows that call (:attr:`ObjectState.landed`); a fresh read restores ``TRUSTED``.

**Retry bookkeeping** is one value per call, :class:`RetryState`, with one inheritance rule
(:meth:`RetryState.merged`) for every merge.

``docs/behaviour.md`` holds :func:`transition_table_markdown`'s rendering of both tables (a
test keeps the two in step).

Preemption is ``submit`` of an *exclusive* call: it cancels every pending call and becomes
the only one. Held calls (DESIGN §3 "Call groups across objects"): ``submit(call, future,
holds)`` admits a call at once (merge, supersession, staleness, elision and preemption as
usual) but does not send it while it holds any token; one object's calls go in order, so calls
behind a held head wait too. A held call asks for no grant (no token, no worker, no lane). A
merged entry holds the union of both entries' holds; a call put back after a retry or a 409
holds nothing (it was sent, so its prerequisites had succeeded). A held call may wait for calls
on its own object too (``behind``: their futures, given at submit): a merge, a supersession or
a call put back moves an entry to an older slot, and a held entry is never placed ahead of a
call it waits for (it goes right behind the last one instead), so it never holds back its own
prerequisites.

**Withdrawing one call** (``withdraw(future)``; ``cancel`` withdraws by call type). A call is
withdrawn by its future, never by its type, so a later call of the same type (someone
else's) stays. A pending call resolves ``CallCancelled`` at once; a call in flight cannot be
recalled, but it is not sent again: when its request ends retryably (429, 5xx, a lost
reply) or with a 409 it resolves ``CallCancelled`` instead of going back to the queue (a
success still resolves ``SUCCESS``: it landed). *Merges:* an entry carries the intents of
every call merged into it (its own future, and the futures it overwrote, which resolved
``OVERWRITTEN`` naming it as their ``successor``). Withdrawing one of them marks it; the
entry is withdrawn only once every intent it carries is. Until then the merged call (one
value, which cannot be split) is sent whole, the withdrawn intent with it, and the entry's
future resolves as usual: what was merged with a live call is in that call's hands. A
superseded call is carried the same way by the call that superseded it (that call carries on
its purpose: it is its ``successor``).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final

from mypy_extensions import mypyc_attr

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
from .objects import Obj, ObjectRef, resource_version, rv_is_newer, uid_and_version

__all__ = [
    "EVENT_DOCS",
    "NO_HOLDS",
    "TABLE",
    "TRANSITIONS",
    "TRUST_DOCS",
    "TRUST_TABLE",
    "Done",
    "Effect",
    "Event",
    "InvalidTransition",
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
    "Trust",
    "TrustEvent",
    "about",
    "dependency_failed",
    "transition_table_markdown",
]


# --------------------------------------------------------------------------- the object machine


class State(enum.Enum):
    """Named states of one object."""

    IDLE = "idle"
    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    IN_FLIGHT_PENDING = "in_flight_pending"
    RETIRING = "retiring"
    RETIRED = "retired"

    # Members are singletons: identity hashing (C) instead of Enum's hash of the name (Python),
    # for the table lookups on every event.
    __hash__ = object.__hash__


class Event(enum.Enum):
    """What the rules made of one input (``input/outcome``); :attr:`input` names the input."""

    SUBMIT_QUEUED = "submit/queued"
    SUBMIT_RESOLVED = "submit/resolved"
    SUBMIT_CLEARED = "submit/cleared"
    SUBMIT_REFUSED = "submit/refused"
    GRANT_SEND = "grant/send"
    GRANT_SEND_LAST = "grant/send-last"
    GRANT_REFUND = "grant/refund"
    GRANT_CLEARED = "grant/cleared"
    DONE_IDLE = "done/idle"
    DONE_PENDING = "done/pending"
    DONE_GONE = "done/gone"
    OBSERVED = "observed"
    OBSERVED_CLEARED = "observed/cleared"
    DELETED = "deleted"
    CANCEL = "cancel"
    CANCEL_CLEARED = "cancel/cleared"
    WITHDRAW = "withdraw"
    WITHDRAW_CLEARED = "withdraw/cleared"
    CLOSE = "close"
    REVOKE = "revoke"
    RELEASE = "release"
    DEPENDENCY_FAILED = "dependency_failed"
    DEPENDENCY_FAILED_CLEARED = "dependency_failed/cleared"

    __hash__ = object.__hash__  # singletons: see State

    @property
    def input(self) -> str:
        """The input method this event comes from (``submit``, ``grant``, ...)."""
        return self.value.partition("/")[0]


@mypyc_attr(native_class=False)  # compiled build: a builtin exception base
class InvalidTransition(RuntimeError):
    """An event the current state does not accept: a bug in the shell or the executor."""


_I, _P, _F, _FP, _R, _X = (
    State.IDLE,
    State.PENDING,
    State.IN_FLIGHT,
    State.IN_FLIGHT_PENDING,
    State.RETIRING,
    State.RETIRED,
)
_EVERY: Final = (_I, _P, _F, _FP, _R, _X)


def _same(event: Event, states: tuple[State, ...] = _EVERY) -> dict[tuple[State, Event], State]:
    """Rows of ``event`` that leave the state as it is."""
    return {(state, event): state for state in states}


TABLE: Final[dict[tuple[State, Event], State]] = {
    # a new call: the call (alone or merged) waits, or it resolves at once
    (_I, Event.SUBMIT_QUEUED): _P,
    (_P, Event.SUBMIT_QUEUED): _P,
    (_F, Event.SUBMIT_QUEUED): _FP,
    (_FP, Event.SUBMIT_QUEUED): _FP,
    **_same(Event.SUBMIT_RESOLVED, (_I, _P, _F, _FP)),
    (_P, Event.SUBMIT_CLEARED): _I,
    (_FP, Event.SUBMIT_CLEARED): _F,
    **_same(Event.SUBMIT_REFUSED, (_R, _X)),
    # the executor reserved a token and a worker
    (_P, Event.GRANT_SEND): _FP,
    (_P, Event.GRANT_SEND_LAST): _F,
    **_same(Event.GRANT_REFUND),
    (_P, Event.GRANT_CLEARED): _I,
    # the request in flight ended
    (_F, Event.DONE_IDLE): _I,
    (_FP, Event.DONE_IDLE): _I,
    (_F, Event.DONE_PENDING): _P,
    (_FP, Event.DONE_PENDING): _P,
    (_F, Event.DONE_GONE): _X,
    (_FP, Event.DONE_GONE): _X,
    (_R, Event.DONE_GONE): _X,
    # informer update
    **_same(Event.OBSERVED),
    (_P, Event.OBSERVED_CLEARED): _I,
    (_FP, Event.OBSERVED_CLEARED): _F,
    # informer delete (or 404): retire now, or once the request in flight ends
    (_I, Event.DELETED): _X,
    (_P, Event.DELETED): _X,
    (_F, Event.DELETED): _R,
    (_FP, Event.DELETED): _R,
    **_same(Event.DELETED, (_R, _X)),
    # a caller withdraws pending calls
    **_same(Event.CANCEL),
    (_P, Event.CANCEL_CLEARED): _I,
    (_FP, Event.CANCEL_CLEARED): _F,
    # a caller withdraws one call, by its future (pending: now; in flight: no retry)
    **_same(Event.WITHDRAW),
    (_P, Event.WITHDRAW_CLEARED): _I,
    (_FP, Event.WITHDRAW_CLEARED): _F,
    # dispatcher shutdown
    **{(state, Event.CLOSE): _X for state in _EVERY},
    # leadership lost: everything pending resolves
    (_I, Event.REVOKE): _I,
    (_P, Event.REVOKE): _I,
    (_F, Event.REVOKE): _F,
    (_FP, Event.REVOKE): _F,
    **_same(Event.REVOKE, (_R, _X)),
    # prerequisites of held calls
    **_same(Event.RELEASE),
    **_same(Event.DEPENDENCY_FAILED),
    (_P, Event.DEPENDENCY_FAILED_CLEARED): _I,
    (_FP, Event.DEPENDENCY_FAILED_CLEARED): _F,
}
"""The object machine: ``(state, event) -> state``. A pair not listed is an
:class:`InvalidTransition`."""

_NEXT: Final[dict[State, dict[Event, State]]] = {
    state: {e: target for (s, e), target in TABLE.items() if s is state} for state in State
}
""":data:`TABLE` by state (the same mapping, looked up without building a key tuple)."""

TRANSITIONS: Final[dict[State, frozenset[str]]] = {
    state: frozenset(e.input for e in row) for state, row in _NEXT.items()
}
"""Inputs accepted per state, derived from :data:`TABLE`. ``done`` only while something is in
flight; ``RETIRED`` accepts the rest only to tolerate late messages."""

EVENT_DOCS: Final[dict[Event, str]] = {
    Event.SUBMIT_QUEUED: "a new call (alone, merged with a pending one, or superseding pending "
    "ones) waits to be sent",
    Event.SUBMIT_RESOLVED: "a new call resolves at once (skipped, stale, failing its precheck, "
    "cancelled behind a deletion); what waited still waits",
    Event.SUBMIT_CLEARED: "a new call resolves at once and the last pending calls go with it "
    "(a merge that made it a no-op; a preemption that is a no-op or rides on the one in flight)",
    Event.SUBMIT_REFUSED: "the object is gone: the call resolves `CallCancelled`",
    Event.GRANT_SEND: "the head call (or the re-read it needs) goes in flight; others wait",
    Event.GRANT_SEND_LAST: "the head call (or its re-read) goes in flight; nothing else waits",
    Event.GRANT_REFUND: "nothing sendable now (held, backing off, a request in flight, gone, or "
    "a late grant): `Refund`",
    Event.GRANT_CLEARED: "every pending call resolved on the way (elided, stale, failing its "
    "precheck): `Refund`",
    Event.DONE_IDLE: "the request in flight ended; nothing waits",
    Event.DONE_PENDING: "the request in flight ended; calls wait (the call itself, put back "
    "after a retryable failure, a 409 or its re-read, or to read its object once when its "
    "retries ran out without an answer; or others)",
    Event.DONE_GONE: "the request in flight ended and the object is gone (404, a deletion "
    "that succeeded, or deleted meanwhile): `Retire`",
    Event.OBSERVED: "informer update: a newer object is adopted and pending calls re-judged "
    "(or an older one ignored); some still wait, or none did",
    Event.OBSERVED_CLEARED: "informer update: every pending call resolved (elided or stale)",
    Event.DELETED: "informer delete or a synthetic one: pending calls resolve (`CallCancelled`; "
    "a pending deletion `SUCCESS`), `Retire` (final once nothing is in flight; nothing more "
    "when gone already)",
    Event.CANCEL: "a caller withdraws pending calls; some still wait, or none did",
    Event.CANCEL_CLEARED: "a caller withdraws the last pending calls",
    Event.WITHDRAW: "a caller withdraws the call of one future: the entry carrying it resolves "
    "`CallCancelled` once every intent it carries is withdrawn (pending: now; in flight: when "
    "its request ends retryably or with a 409, instead of a retry); some still wait, or none did",
    Event.WITHDRAW_CLEARED: "a caller withdraws the call of one future, and it was the last "
    "pending one",
    Event.CLOSE: "dispatcher shutdown: everything resolves `DispatcherClosed`, `Retire` "
    "(nothing more when already retired)",
    Event.REVOKE: "leadership lost: every pending call resolves with the error; the request in "
    "flight finishes as usual",
    Event.RELEASE: "a prerequisite succeeded: calls held on its token lose that hold (`Ready` "
    "once the head holds nothing)",
    Event.DEPENDENCY_FAILED: "a prerequisite failed: calls held on its token resolve "
    "`DependencyFailed`; others still wait, or none did",
    Event.DEPENDENCY_FAILED_CLEARED: "a prerequisite failed: the calls held on its token were "
    "the last pending ones",
}


# --------------------------------------------------------------------------- the trust machine


class Trust(enum.Enum):
    """May the observed object be relied on?"""

    TRUSTED = "trusted"
    RV_STALE = "rv_stale"
    UNTRUSTED = "untrusted"
    UNTRUSTED_RV_STALE = "untrusted_rv_stale"

    __hash__ = object.__hash__  # singletons: see State


class TrustEvent(enum.Enum):
    """What happened to what is known of the object."""

    LANDED = "landed"
    SHOWN = "shown"
    AMBIGUOUS = "ambiguous"
    REREAD_FAILED = "reread_failed"
    NEWER = "newer"
    FRESH = "fresh"

    __hash__ = object.__hash__  # singletons: see State


_T, _RS, _U, _URS = Trust.TRUSTED, Trust.RV_STALE, Trust.UNTRUSTED, Trust.UNTRUSTED_RV_STALE

TRUST_TABLE: Final[dict[tuple[Trust, TrustEvent], Trust]] = {
    (_T, TrustEvent.LANDED): _RS,
    (_RS, TrustEvent.LANDED): _RS,
    (_U, TrustEvent.LANDED): _URS,
    (_URS, TrustEvent.LANDED): _URS,
    (_T, TrustEvent.SHOWN): _T,
    (_RS, TrustEvent.SHOWN): _T,
    (_U, TrustEvent.SHOWN): _U,
    (_URS, TrustEvent.SHOWN): _U,
    (_T, TrustEvent.AMBIGUOUS): _U,
    (_RS, TrustEvent.AMBIGUOUS): _URS,
    (_U, TrustEvent.AMBIGUOUS): _U,
    (_URS, TrustEvent.AMBIGUOUS): _URS,
    (_T, TrustEvent.REREAD_FAILED): _U,
    (_RS, TrustEvent.REREAD_FAILED): _URS,
    (_U, TrustEvent.REREAD_FAILED): _U,
    (_URS, TrustEvent.REREAD_FAILED): _URS,
    (_U, TrustEvent.NEWER): _T,
    (_URS, TrustEvent.NEWER): _RS,
    **{(trust, TrustEvent.FRESH): _T for trust in Trust},
}
"""The trust machine: ``(trust, event) -> trust``. A pair not listed is an
:class:`InvalidTransition`."""

_TRUST_NEXT: Final[dict[Trust, dict[TrustEvent, Trust]]] = {
    trust: {e: target for (t, e), target in TRUST_TABLE.items() if t is trust} for trust in Trust
}

TRUST_DOCS: Final[dict[Trust | TrustEvent, str]] = {
    Trust.TRUSTED: "the observed object is the server's: no-op elision, requests computed on it",
    Trust.RV_STALE: "content right (a call that landed without a reply object is applied on "
    "top), resourceVersion behind: elision, but calls that read the object re-read first",
    Trust.UNTRUSTED: "a request may or may not have landed: no elision, calls that read the "
    "object re-read first, until an object newer than `untrusted_rv` is observed",
    Trust.UNTRUSTED_RV_STALE: "both of the above",
    TrustEvent.LANDED: "a request landed without a reply object (a binding): its call is "
    "applied to the observed object and kept as `landed`",
    TrustEvent.SHOWN: "an observed object shows the `landed` call",
    TrustEvent.AMBIGUOUS: "a request failed retryably (it may have landed): distrust what was "
    "observed when it was computed (unless a newer object is already observed; an older bar "
    "stays)",
    TrustEvent.REREAD_FAILED: "a 409's re-read failed: distrust the observed object",
    TrustEvent.NEWER: "an object newer than `untrusted_rv` is observed (with preconditions, it "
    "either holds that request or proves it was never applied)",
    TrustEvent.FRESH: "the object was read from the server (a re-read, or after a 409)",
}


def _markdown_table(
    head: str, states: list[Any], rows: list[tuple[Any, str]], table: dict[Any, Any]
) -> list[str]:
    lines = [
        f"| {head} | " + " | ".join(f"`{s.value}`" for s in states) + " | what happens |",
        "|---" * (len(states) + 2) + "|",
    ]
    for event, doc in rows:
        cells = []
        for state in states:
            target = table.get((state, event))
            cells.append("—" if target is None else f"`{target.value}`")
        lines.append(f"| `{event.value}` | " + " | ".join(cells) + f" | {doc} |")
    return lines


def transition_table_markdown() -> str:
    """Both tables as Markdown: one row per event, one column per state, the target state in
    each cell (``—``: the pair raises :class:`InvalidTransition`)."""
    lines = ["#### Object machine (`TABLE`)", ""]
    lines += _markdown_table(
        "event \\ state", list(State), [(e, EVENT_DOCS[e]) for e in Event], dict(TABLE)
    )
    lines += ["", "#### Trust machine (`TRUST_TABLE`)", ""]
    lines += _markdown_table(
        "event \\ trust",
        list(Trust),
        [(e, TRUST_DOCS[e]) for e in TrustEvent],
        dict(TRUST_TABLE),
    )
    return "\n".join(lines) + "\n"


# Hot-path names (a module global instead of an attribute of the enum class).
_SUBMIT_QUEUED: Final = Event.SUBMIT_QUEUED
_SUBMIT_RESOLVED: Final = Event.SUBMIT_RESOLVED
_SUBMIT_CLEARED: Final = Event.SUBMIT_CLEARED
_GRANT_SEND: Final = Event.GRANT_SEND
_GRANT_SEND_LAST: Final = Event.GRANT_SEND_LAST
_GRANT_REFUND: Final = Event.GRANT_REFUND
_GRANT_CLEARED: Final = Event.GRANT_CLEARED
_DONE_IDLE: Final = Event.DONE_IDLE
_DONE_PENDING: Final = Event.DONE_PENDING
_DONE_GONE: Final = Event.DONE_GONE
_GONE: Final = frozenset({_R, _X})  # the object is gone: nothing is accepted any more
_QUEUED: Final = frozenset({_P, _FP})  # calls wait
_ELIDES: Final = frozenset({_T, _RS})  # no-op elision allowed
_UNTRUSTED: Final = frozenset({_U, _URS})


# --------------------------------------------------------------------------- effects
# The effects made for every call (and ``Done``) have ``Final`` fields instead of ``frozen=True``:
# as immutable to mypy, without a frozen ``__init__``'s cost (see :mod:`.messages`).
# Compiled (setup.py) they stay non-native: mypyc makes a ``Final`` attribute read-only, which
# the ``__init__`` that ``@dataclass`` writes could not set.


@mypyc_attr(native_class=False)
@dataclass(slots=True)
class Resolve:
    """Resolve ``future`` (exactly once) with ``outcome``. An ``OVERWRITTEN`` outcome names
    the ``successor``: the future of the newer call that merged or superseded this one (the
    shell sets ``future.successor`` before resolving, so prerequisites can be followed)."""

    future: Final[Any]
    call_type: Final[str]
    outcome: Final[Outcome | CallOutcomeError | DispatcherClosed]
    successor: Final[Any] = None


@mypyc_attr(native_class=False)
@dataclass(slots=True)
class Ready:
    """Tell the executor this object has something to send in lane ``relevance``, not before
    ``not_before`` (the shell's clock)."""

    relevance: Final[int]
    not_before: Final[float]


@mypyc_attr(native_class=False)
@dataclass(slots=True)
class Send:
    """Answer to a grant: perform ``call`` against ``obj``; with ``read``, only re-read the
    object (one GET) so the call can be computed against a trusted object; with ``verify``
    too, the read is the last one of a call whose last requests went unanswered: the object
    comes back as read (whatever its UID), for :meth:`~.calls.Call.landed` to judge."""

    call: Final[Call]
    obj: Final[Obj | None]
    attempt: Final[int]
    read: Final[bool] = False
    verify: Final[bool] = False


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


class Result(enum.Enum):
    """How a request ended, as classified by the executor worker."""

    SUCCESS = "success"
    RETRY = "retry"  # retryable error: try again after ``delay`` (within the budget)
    CONFLICT = "conflict"  # 409; ``obj`` is the one re-read (None if that read failed)
    NOT_FOUND = "not_found"
    FAILED = "failed"  # permanent

    __hash__ = object.__hash__  # singletons: see State


@mypyc_attr(native_class=False)
@dataclass(slots=True)
class Done:
    """The end of the request in flight, as the executor classified it."""

    call: Final[Call]
    result: Final[Result]
    obj: Final[Obj | None] = None
    error: Final[BaseException | None] = None
    delay: Final[float] = 0.0


def about(ref: ObjectRef, why: str) -> str:
    """The message of an outcome error about the object ``ref`` names (kind, namespace/name,
    UID)."""
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


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True, slots=True)
class RetryState:
    """A call's retry bookkeeping, as one value.

    ``attempt``: requests of the call already sent (re-reads not counted); ``conflicts``: 409s
    already rebased on; ``failures``: retryable failures (sends and re-reads); ``not_before``:
    backoff after the last retryable failure; ``deadline``: end of the retry budget, which
    runs from the first failure.

    One inheritance rule, :meth:`merged`, for every merge (a new call merged with a pending
    one of its type, a preemption merged with a pending one, a call put back after a retry
    merged with one that arrived meanwhile): the merged call is as far along as the further of
    the two, since both describe the same intent on the same object and a merge must never
    reset or extend a retry budget: counts and backoff are the larger, the deadline the
    earlier.
    """

    attempt: int = 0
    conflicts: int = 0
    failures: int = 0
    not_before: float = 0.0
    deadline: float | None = None

    def merged(self, other: RetryState) -> RetryState:
        """The bookkeeping of the merge of two calls (see the class docstring)."""
        if other is _FRESH:
            return self
        if self is _FRESH:
            return other
        deadlines = [d for d in (self.deadline, other.deadline) if d is not None]
        return RetryState(
            max(self.attempt, other.attempt),
            max(self.conflicts, other.conflicts),
            max(self.failures, other.failures),
            max(self.not_before, other.not_before),
            min(deadlines) if deadlines else None,
        )

    def sent(self) -> RetryState:
        """One more request of the call went out."""
        if self is _FRESH:
            return _SENT_ONCE  # most calls: no new frozen object (about 9,000 instructions)
        return RetryState(
            self.attempt + 1, self.conflicts, self.failures, self.not_before, self.deadline
        )

    def conflicted(self) -> RetryState:
        """One more 409 to rebase on."""
        return RetryState(
            self.attempt, self.conflicts + 1, self.failures, self.not_before, self.deadline
        )

    def failed(self, at: float, deadline: float) -> RetryState:
        """One more retryable failure: back off until ``at``, within ``deadline``."""
        return RetryState(self.attempt, self.conflicts, self.failures + 1, at, deadline)


_FRESH: Final = RetryState()
"""The bookkeeping of a call never sent (shared)."""
_SENT_ONCE: Final = RetryState(attempt=1)
"""The bookkeeping of a call sent once, never failed (shared)."""

_UNJUDGED: Final[Any] = object()

NO_HOLDS: Final[frozenset[Hashable]] = frozenset()
"""The holds of a call that waits for nothing (shared: most calls)."""


_NOTHING_CARRIED: Final[tuple[Any, ...]] = ()


class _Entry:
    """A tracked call and its caller's future."""

    __slots__ = (
        "behind",
        "call",
        "carried",
        "future",
        "holds",
        "judged_obs",
        "judged_trust",
        "retry",
        "sent_rv",
        "unanswered",
        "withdrawn",
        "withdrawn_for",
    )

    def __init__(
        self,
        call: Call,
        future: Any,
        holds: frozenset[Hashable] = NO_HOLDS,
        behind: frozenset[Any] = NO_HOLDS,
    ) -> None:
        self.call = call
        self.future = future
        self.holds = holds  # prerequisite tokens not released yet: not sendable while any
        # While held: futures of calls on this object it waits for (transitively), which it
        # must never be queued ahead of (:meth:`ObjectState._place`)
        self.behind = behind
        # Futures of older calls merged into this one (resolved OVERWRITTEN): their intents
        # are in ``call`` too. Withdrawn: which of ``future`` and ``carried`` were withdrawn
        # (:meth:`ObjectState.withdraw`); the entry itself is once all of them are.
        self.carried: tuple[Any, ...] = _NOTHING_CARRIED
        self.withdrawn: frozenset[Any] | None = None
        self.withdrawn_for: CallCancelled | None = None  # why, when not by its caller
        self.retry = _FRESH
        self.sent_rv: str | None = None  # resourceVersion the last attempt was computed on
        # The observed object (by identity) and trust this call last passed _judge against
        # with nothing in flight: elision and staleness cannot differ until one changes.
        self.judged_obs: Any = _UNJUDGED
        self.judged_trust = False
        # Set when the retries ran out and the last request went unanswered: why it gave up
        # and the last error; the object is read once (verify) before the call resolves.
        self.unanswered: tuple[str, BaseException | None] | None = None

    def carries(self, token: Any) -> bool:
        """Whether this entry carries the intent of the call of future ``token``."""
        return token is self.future or token in self.carried

    @property
    def cancelled(self) -> bool:
        """Whether every intent this entry carries was withdrawn."""
        withdrawn = self.withdrawn
        return (
            withdrawn is not None
            and self.future in withdrawn
            and all(f in withdrawn for f in self.carried)
        )

    def carries_any(self, futures: frozenset[Any]) -> bool:
        """Whether this entry carries the intent of any of ``futures``."""
        return self.future in futures or any(f in futures for f in self.carried)

    def absorb(self, older: _Entry) -> None:
        """After a merge into this entry: carry ``older``'s intents (and what of them was
        withdrawn) too."""
        self.carried = (*older.carried, older.future, *self.carried)
        if older.withdrawn is not None:
            self.withdrawn = older.withdrawn | (self.withdrawn or frozenset())
            if self.withdrawn_for is None:
                self.withdrawn_for = older.withdrawn_for


_SKIPPED: Final = Outcome.SKIPPED
_OVERWRITTEN: Final = Outcome.OVERWRITTEN
_SUCCESS: Final = Outcome.SUCCESS


class ObjectState:
    """The rules of one object. Every input method returns the effects to carry out, in
    order. Not thread-safe: the object's actor feeds it one event at a time."""

    __slots__ = (
        "inflight",
        "landed",
        "observed",
        "observed_rv",
        "queue",
        "ready_lane",
        "request",
        "retry",
        "state",
        "trust",
        "uid",
        "untrusted_rv",
    )

    def __init__(self, uid: str, retry: RetryConfig) -> None:
        self.uid = uid
        self.retry = retry
        self.state = State.IDLE
        self.observed: Obj | None = None
        # The observed object's resourceVersion, read once per observed object (None: absent,
        # or nothing observed)
        self.observed_rv: str | None = None
        self.queue: list[_Entry] = []  # pending calls in send order, one per call type
        self.inflight: _Entry | None = None  # the call whose request is on the wire
        self.request: Send | None = None  # that request (the call, or the re-read before it)
        # The grant handshake: the lane of the Ready the executor holds for this object, if
        # any (a Ready is only repeated for a more urgent head).
        self.ready_lane: int | None = None
        # The trust machine (module docstring) and its data: the version an untrusted state
        # waits to see passed, and the call that landed without a reply object and is kept
        # applied on top of observed objects until one shows it.
        self.trust = Trust.TRUSTED
        self.untrusted_rv: str | None = None
        self.landed: Call | None = None

    # ------------------------------------------------------------------ queries

    @property
    def idle(self) -> bool:
        """Nothing pending or in flight and the object not gone: the actor may be reaped."""
        return self.state is State.IDLE

    @property
    def trusted(self) -> bool:
        """Whether no-op elision may rely on the observed object."""
        return self.trust in _ELIDES

    @property
    def rv_stale(self) -> bool:
        """Whether the observed content is right but its resourceVersion behind the server's."""
        return self.trust is _RS or self.trust is _URS

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

    # ------------------------------------------------------------------ inputs

    def submit(
        self,
        call: Call,
        future: Any,
        holds: frozenset[Hashable] = NO_HOLDS,
        behind: frozenset[Any] = NO_HOLDS,
    ) -> list[Effect]:
        """A caller's new call. Exclusive calls preempt; others merge, supersede, are skipped,
        or queue behind what is pending. With ``holds`` (opaque tokens), the call is admitted
        the same way but not sent before :meth:`release` removed every token; while held, it
        is never queued ahead of a call carrying one of the futures in ``behind`` (the calls
        on this object it waits for)."""
        self._check("submit")
        out: list[Effect] = []
        entry = _Entry(call, future, holds, behind)
        if self.state in _GONE:
            self._fail(out, entry, CallCancelled, "object deleted")
            return self._settle(out, Event.SUBMIT_REFUSED)
        if call.basis is not None:
            self._observe(call.basis)
        if self._preempt(out, entry) if call.exclusive else self._submit(out, entry):
            event = _SUBMIT_QUEUED
        else:
            event = _SUBMIT_CLEARED if self._drained() else _SUBMIT_RESOLVED
        return self._settle(out, event)

    def grant(self, now: float) -> list[Effect]:
        """The executor reserved a token and a worker: send the head call (or its re-read), or
        refund. Calls found elided, stale or failing their precheck on the way resolve."""
        self._check("grant")
        out: list[Effect] = []
        self.ready_lane = None
        if self.state is _P:
            queue = self.queue
            while queue:
                entry = queue[0]
                if entry.holds or entry.retry.not_before > now:
                    break  # held, or backing off (_settle sends a delayed Ready)
                queue.pop(0)
                verdict = self._judge(entry)
                if verdict is not None:
                    out.append(verdict)
                    continue
                out.append(self._send(entry))
                return self._settle(out, _GRANT_SEND if queue else _GRANT_SEND_LAST)
        out.append(Refund())
        return self._settle(out, _GRANT_CLEARED if self._drained() else _GRANT_REFUND)

    def done(self, done: Done, now: float) -> list[Effect]:
        """The request in flight ended. ``now`` is the shell's clock (for backoff and budget)."""
        self._check("done")
        entry, request = self.inflight, self.request
        out: list[Effect] = []
        if entry is None or request is None or entry.call is not done.call:
            raise InvalidTransition(f"done for {done.call.describe()} which is not in flight")
        self.inflight = self.request = None
        if request.verify:
            retired = self._verified(out, entry, done)
        elif request.read:
            retired = self._read_done(out, entry, done, now)
        else:
            retired = self._send_done(out, entry, done, now)
        if self.state is _R:  # gone before this request ended: leave now
            out.append(Retire(tombstone=False, final=True))
            event = _DONE_GONE
        elif retired:
            event = _DONE_GONE
        else:
            event = _DONE_PENDING if self.queue else _DONE_IDLE
        return self._settle(out, event)

    def observed_event(self, obj: Obj) -> list[Effect]:
        """Informer add/update. An object that is not a newer state of this one is ignored, and
        so is any object once retired."""
        self._check("observed")
        out: list[Effect] = []
        if self.state is _X:
            return out
        accepted, rv = self._accepts(obj)
        if not accepted:
            return out
        self._adopt(obj, rv)
        self._revisit(out)
        return self._settle(out, Event.OBSERVED_CLEARED if self._drained() else Event.OBSERVED)

    def deleted(self) -> list[Effect]:
        """Informer delete (or a synthetic one): cancel what waits and retire."""
        self._check("deleted")
        out: list[Effect] = []
        self._retire(out, "object deleted")
        return self._settle(out, Event.DELETED)

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
        return self._settle(out, Event.CANCEL_CLEARED if self._drained() else Event.CANCEL)

    def withdraw(self, token: Any, cause: CallCancelled | None = None) -> list[Effect]:
        """A caller withdraws the call of future ``token`` (and no other): every entry carrying
        its intent marks it withdrawn. An entry whose intents are all withdrawn is withdrawn:
        pending, it resolves ``CallCancelled`` now; in flight, when its request ends
        retryably or with a 409 it resolves ``CallCancelled`` instead of being retried (a
        success still resolves ``SUCCESS``: it landed). An entry that still carries an intent
        not withdrawn is sent whole (see the module docstring). ``cause``: why, when it is
        not the caller's own choice (a call group cancelled because its owner was deleted):
        the ``CallCancelled`` says so and carries it."""
        self._check("withdraw")
        out: list[Effect] = []
        inflight = self.inflight
        if inflight is not None and inflight.carries(token):
            self._mark_withdrawn(inflight, token, cause)
        queue = self.queue
        for i, entry in enumerate(queue):
            if entry.carries(token):
                self._mark_withdrawn(entry, token, cause)
                if entry.cancelled:
                    del queue[i]
                    self._fail_entry(out, entry, self._withdrawn(entry, in_flight=False))
                break  # one pending entry per call type: at most one carries a call
        return self._settle(out, Event.WITHDRAW_CLEARED if self._drained() else Event.WITHDRAW)

    def _withdrawn(self, entry: _Entry, *, in_flight: bool) -> CallCancelled:
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

    @staticmethod
    def _mark_withdrawn(entry: _Entry, token: Any, cause: CallCancelled | None) -> None:
        if cause is not None:
            entry.withdrawn_for = cause
        withdrawn = entry.withdrawn
        entry.withdrawn = frozenset((token,)) if withdrawn is None else withdrawn | {token}

    def close(self) -> list[Effect]:
        """Dispatcher shutdown: resolve everything with ``DispatcherClosed`` and retire (once:
        nothing more when already retired)."""
        self._check("close")
        out: list[Effect] = []
        if self.state is not _X:
            closed = DispatcherClosed("dispatcher stopped before the call completed")
            self._drop_all(out, closed)
            out.append(Retire(tombstone=False, final=True))
        return self._settle(out, Event.CLOSE)

    def revoke(self, error: DispatcherClosed) -> list[Effect]:
        """Leadership lost: every call not on the wire resolves with ``error``; the call in
        flight (if any) finishes and reports as usual."""
        self._check("revoke")
        out: list[Effect] = []
        for entry in self.queue:
            out.append(Resolve(entry.future, entry.call.call_type, error))
        self.queue = []
        return self._settle(out, Event.REVOKE)

    def release(self, token: Hashable) -> list[Effect]:
        """A prerequisite succeeded: no call holds ``token`` any more; a head call left with
        no holds becomes sendable."""
        self._check("release")
        for entry in self.queue:
            holds = entry.holds
            if token in holds:
                entry.holds = holds = holds - {token}
                if not holds:
                    entry.behind = NO_HOLDS
        return self._settle([], Event.RELEASE)

    def dependency_failed(self, token: Hashable, cause: BaseException) -> list[Effect]:
        """A prerequisite failed (or was cancelled): every call holding ``token`` resolves
        :class:`~.errors.DependencyFailed` with ``cause`` and leaves the queue unsent."""
        self._check("dependency_failed")
        out: list[Effect] = []
        keep: list[_Entry] = []
        for entry in self.queue:
            if token in entry.holds:
                call = entry.call
                error = dependency_failed(call, cause)
                out.append(Resolve(entry.future, call.call_type, error))
            else:
                keep.append(entry)
        self.queue = keep
        event = Event.DEPENDENCY_FAILED_CLEARED if self._drained() else Event.DEPENDENCY_FAILED
        return self._settle(out, event)

    # ------------------------------------------------------------------ submit rules

    def _preempt(self, out: list[Effect], entry: _Entry) -> bool:
        """An exclusive call cancels everything pending and becomes the only pending call.
        Whether it waits (else it resolved at once)."""
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
            self._merge(out, entry, same)
        inflight = self.inflight
        if inflight is not None and inflight.call.call_type == call.call_type:
            out.append(Resolve(entry.future, call.call_type, _SKIPPED))  # already on its way
            return False
        if self._is_noop(entry.call):
            out.append(Resolve(entry.future, call.call_type, _SKIPPED))
            return False
        self.queue.append(entry)
        return True

    def _submit(self, out: list[Effect], entry: _Entry) -> bool:
        """A call that does not preempt. Whether it (or its merge) waits."""
        call = entry.call
        ctype = call.call_type
        tracked = self._tracked()
        if any(e.call.exclusive for e in tracked):
            self._fail(out, entry, CallCancelled, "object is being deleted")
            return False
        if (reason := call.revalidate(call.basis, self.observed)) is not None:
            self._fail(out, entry, CallStale, reason)
            return False
        if (reason := call.precheck(self.observed)) is not None:
            self._fail(out, entry, CallConflict, reason)
            return False
        if any(ctype in e.call.supersedes for e in tracked):
            out.append(Resolve(entry.future, ctype, _SKIPPED))  # a superseding call is tracked
            return False
        queue = self.queue
        for i, pending in enumerate(queue):
            if pending.call.call_type == ctype:
                # same type: the newer values win, the older call fills the gaps
                self._merge(out, entry, pending)
                if self._is_noop(entry.call):
                    del queue[i]
                    out.append(Resolve(entry.future, ctype, _SKIPPED))
                    return False
                if entry.holds and entry.behind:
                    del queue[i]
                    self._place(queue, entry, i)
                else:
                    queue[i] = entry
                return True
        if self._is_noop(call):
            out.append(Resolve(entry.future, ctype, _SKIPPED))
            return False
        if self.inflight is None:  # it passed every check of _judge just now
            self._judged(entry)
        slot: int | None = None
        keep: list[_Entry] = []
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
            self._place(keep, entry, slot)
        self.queue = keep
        return True

    @staticmethod
    def _place(queue: list[_Entry], entry: _Entry, at: int) -> None:
        """Queue ``entry`` at index ``at`` (a merge or a supersession gives it an older call's
        slot), or, if it is held, right behind the last call it waits for that would
        otherwise be behind it: a held call never holds back its own prerequisites."""
        behind = entry.behind
        if entry.holds and behind:
            for j in range(len(queue) - 1, at - 1, -1):
                if queue[j].carries_any(behind):
                    at = j + 1
                    break
        queue.insert(at, entry)

    @staticmethod
    def _merge(out: list[Effect], entry: _Entry, older: _Entry) -> None:
        """The new ``entry`` absorbs the pending ``older`` one of its type: the newer values
        win, the older call fills the gaps; retry bookkeeping by :meth:`RetryState.merged`;
        the holds of both."""
        ctype = entry.call.call_type
        out.append(Merged(ctype))
        entry.call = entry.call.merge(older.call)
        entry.retry = entry.retry.merged(older.retry)
        if older.holds:
            entry.holds = entry.holds | older.holds
            if older.behind:
                entry.behind = entry.behind | older.behind
        entry.absorb(older)
        out.append(Resolve(older.future, older.call.call_type, _OVERWRITTEN, entry.future))

    # ------------------------------------------------------------------ grant and done rules

    def _send(self, entry: _Entry) -> Send:
        """``entry`` goes in flight: its request, or the re-read it needs first (the observed
        object is not trusted as the base of a request, or there is none)."""
        self.inflight = entry
        call = entry.call
        if entry.unanswered is not None:
            send = Send(call, None, entry.retry.attempt, read=True, verify=True)
        elif call.reads_object and (self.trust is not _T or self.observed is None):
            send = Send(call, None, entry.retry.attempt, read=True)
        else:
            retry = entry.retry = entry.retry.sent()
            entry.sent_rv = self.observed_rv
            send = Send(call, self.observed, retry.attempt)
        self.request = send
        return send

    def _read_done(self, out: list[Effect], entry: _Entry, done: Done, now: float) -> bool:
        """The re-read before ``entry`` ended: adopt the object and put the call back first.
        Whether the object retired."""
        result = done.result
        if self.state is _R and result is not Result.NOT_FOUND:
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
            return self._resolve_not_found(out, entry)
        elif result is Result.RETRY or (result is Result.SUCCESS and done.obj is None):
            self._retry_or_fail(out, entry, done, now)
        else:
            self._failed(out, entry, done)
        return False

    def _send_done(self, out: list[Effect], entry: _Entry, done: Done, now: float) -> bool:
        """The call's request ended. Whether the object retired."""
        call = entry.call
        result = done.result
        if result is Result.SUCCESS:
            if done.obj is not None:
                self._observe(done.obj)
            elif self.observed is not None:
                # no object in the reply (a binding): the server now holds this call, at a
                # resourceVersion not known yet
                self.observed = call.apply(self.observed)
                self.observed_rv = resource_version(self.observed)
                self.landed = call
                self._trust_on(TrustEvent.LANDED)
            out.append(Resolve(entry.future, call.call_type, _SUCCESS))
            if call.exclusive:
                self._retire(out, "deleted by " + call.call_type)
                return True
        elif result is Result.NOT_FOUND:
            return self._resolve_not_found(out, entry)
        elif self.state is _R and result in (Result.CONFLICT, Result.RETRY):
            # deleted while in flight: nothing left to retry against; a deletion got its way
            if call.exclusive:
                out.append(Resolve(entry.future, call.call_type, _SUCCESS))
            else:
                self._fail(out, entry, CallCancelled, "object deleted")
        elif result is Result.CONFLICT:
            self._conflict(out, entry, done)
        elif result is Result.RETRY:
            self._ambiguous(entry.sent_rv)  # the request may have been applied
            self._retry_or_fail(out, entry, done, now)
        else:
            self._failed(out, entry, done)
        return False

    def _verified(self, out: list[Effect], entry: _Entry, done: Done) -> bool:
        """The read of a call whose retries ran out without an answer ended: the call
        resolves ``SUCCESS`` if the object shows it landed (:meth:`~.calls.Call.landed`; a
        deletion whose object is gone too), else ``CallFailed``, saying whether the object
        showed it did not land or could not be read (the outcome is then unknown). Whether
        the object retired."""
        call = entry.call
        ctype = call.call_type
        assert entry.unanswered is not None  # _send sent this read for it
        why, cause = entry.unanswered
        entry.unanswered = None
        result, fresh = done.result, done.obj
        if self.state is _R and result is not Result.NOT_FOUND:
            # deleted while the read was on its way: a deletion got its way
            if call.exclusive:
                out.append(Resolve(entry.future, ctype, _SUCCESS))
            else:
                self._fail(out, entry, CallCancelled, "object deleted")
            return False
        if result is Result.NOT_FOUND and call.exclusive:
            return self._resolve_not_found(out, entry)  # gone, as intended
        if result is Result.SUCCESS and fresh is not None:
            self._adopt_fresh(fresh)  # an object of another UID is not adopted
            if call.landed(fresh):
                out.append(Resolve(entry.future, ctype, _SUCCESS))
                if call.exclusive:
                    self._retire(out, "deleted by " + ctype)
                    return True
                self._revisit(out)
                return False
            why += "; read back, the object shows it did not land"
        elif result is Result.NOT_FOUND:
            why += "; read back, the object is not found: it did not land"
        else:
            why += f"; the outcome is unknown: reading the object back failed: {done.error}"
        error = CallFailed(about(call.ref, why), uid=self.uid, call_type=ctype, cause=cause)
        self._fail_entry(out, entry, error)
        self._revisit(out)
        return False

    def _conflict(self, out: list[Effect], entry: _Entry, done: Done) -> None:
        """409: rebase on the object read back (or re-read before the next attempt), within
        the bound on conflicts; a call that landed anyway succeeds."""
        call = entry.call
        fresh = done.obj
        if fresh is not None:
            self._adopt_fresh(fresh)
            if call.landed(fresh):
                out.append(Resolve(entry.future, call.call_type, _SUCCESS))
                self._revisit(out)
                return
        else:
            self._reread_failed()
        retry = entry.retry = entry.retry.conflicted()
        if retry.conflicts > self.retry.max_conflict_retries:
            why = f"conflict after {retry.conflicts} re-reads: {done.error}"
            self._fail(out, entry, CallConflict, why)
        else:
            if entry.withdrawn is None or not entry.cancelled:
                out.append(Rebased(call.call_type))
            self._requeue_front(out, entry)
            self._revisit(out)

    def _resolve_not_found(self, out: list[Effect], entry: _Entry) -> bool:
        """404: a deletion that finds its object gone has done its job; anything else fails
        ``ObjectNotFound``; the object retires."""
        call = entry.call
        outcome: Outcome | CallOutcomeError = (
            _SUCCESS
            if call.exclusive
            else ObjectNotFound(
                about(call.ref, "object not found"), uid=self.uid, call_type=call.call_type
            )
        )
        out.append(Resolve(entry.future, call.call_type, outcome))
        self._retire(out, "object not found")
        return True

    def _retry_or_fail(self, out: list[Effect], entry: _Entry, done: Done, now: float) -> None:
        if entry.withdrawn is not None and entry.cancelled:
            self._fail_entry(out, entry, self._withdrawn(entry, in_flight=True))
            return
        config = self.retry
        retry = entry.retry
        deadline = retry.deadline if retry.deadline is not None else now + config.budget
        at = now + done.delay
        retry = entry.retry = retry.failed(at, deadline)
        attempts = config.max_attempts
        if at > deadline or (attempts is not None and retry.failures >= attempts):
            why = (
                f"gave up after {retry.failures} failed requests "
                f"({config.budget:g} s retry budget): {done.error}"
            )
            error = done.error
            if retry.attempt > 0 and isinstance(error, ApiError) and error.ambiguous:
                # no answer says whether an attempt landed: read the object once first
                entry.unanswered = (why, error)
                self._requeue_front(out, entry)
                return
            self._fail_entry(
                out,
                entry,
                CallFailed(
                    about(entry.call.ref, why),
                    uid=self.uid,
                    call_type=entry.call.call_type,
                    cause=done.error,
                ),
            )
            return
        if self.trust in _ELIDES and retry.attempt > 0 and entry.call.is_noop(self.observed):
            # a newer object already shows the intent (the informer saw our write)
            out.append(Resolve(entry.future, entry.call.call_type, _SKIPPED))
            return
        self._requeue_front(out, entry)

    def _requeue_front(self, out: list[Effect], entry: _Entry) -> None:
        """Put a call that was in flight back at the head, merged with what arrived meanwhile
        (a call of the same type), unless a superseding or exclusive call took over. It holds
        nothing (it was sent); merged into a held pending call, it waits with that call (at the
        head, or right behind the calls that one waits for). A call withdrawn while in flight
        resolves ``CallCancelled`` instead."""
        ctype = entry.call.call_type
        if entry.withdrawn is not None and entry.cancelled:
            self._fail_entry(out, entry, self._withdrawn(entry, in_flight=True))
            return
        for i, pending in enumerate(self.queue):
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
                self._place(self.queue, self.queue.pop(i), 0)
                return
        self.queue.insert(0, entry)

    def _failed(self, out: list[Effect], entry: _Entry, done: Done) -> None:
        error = done.error
        if isinstance(error, DispatcherClosed):  # e.g. the send gate refused: leadership lost
            out.append(Resolve(entry.future, entry.call.call_type, error))
            return
        call = entry.call
        self._fail_entry(
            out,
            entry,
            CallFailed(
                about(call.ref, f"{call.call_type} failed: {error}"),
                uid=self.uid,
                call_type=call.call_type,
                cause=error,
            ),
        )

    # ------------------------------------------------------------------ observation and trust

    def _accepts(self, obj: Obj | None) -> tuple[bool, str | None]:
        """Whether ``obj`` is a newer state of *this* object (same UID, strictly newer
        resourceVersion), and its resourceVersion. Anything else is ignored: the current view
        may hold mutations applied on top of that version."""
        if obj is None:
            return False, None
        uid, rv = uid_and_version(obj)
        return uid == self.uid and rv_is_newer(rv, self.observed_rv, strict=True), rv

    def _observe(self, obj: Obj) -> None:
        accepted, rv = self._accepts(obj)
        if accepted:
            self._adopt(obj, rv)

    def _adopt(self, obj: Obj, rv: str | None) -> None:
        """Make ``obj`` (accepted as newer, at resourceVersion ``rv``) the observed state. A
        call known to have landed without a reply object stays applied on top until an
        observed object shows it."""
        landed = self.landed
        if landed is not None:
            if landed.is_noop(obj):
                self.landed = None
                self._trust_on(TrustEvent.SHOWN)
            else:
                obj = landed.apply(obj)
                rv = resource_version(obj)
        self.observed, self.observed_rv = obj, rv
        if self.trust in _UNTRUSTED and self._passed(self.untrusted_rv):
            self.untrusted_rv = None
            self._trust_on(TrustEvent.NEWER)

    def _passed(self, rv: str | None) -> bool:
        """Whether the observed object is strictly newer than resourceVersion ``rv``."""
        observed_rv = self.observed_rv
        return (
            rv is not None
            and observed_rv is not None
            and rv_is_newer(observed_rv, rv or None, strict=True)
        )

    def _adopt_fresh(self, obj: Obj) -> None:
        """Adopt an object just read from the server (after a 409, or a re-read): it is
        authoritative, even at the same resourceVersion as what was observed."""
        uid, rv = uid_and_version(obj)
        if uid != self.uid:
            return
        if self.observed is None or rv_is_newer(rv, self.observed_rv):
            landed = self.landed
            if landed is not None and landed.is_noop(obj):
                self.landed = None
            if self.landed is not None:
                obj = self.landed.apply(obj)
                rv = resource_version(obj)
            self.observed, self.observed_rv = obj, rv
        self.untrusted_rv = None
        self._trust_on(TrustEvent.FRESH)

    def _ambiguous(self, rv: str | None) -> None:
        """A request computed on resourceVersion ``rv`` may or may not have been applied:
        distrust what was observed before it, unless a newer object is observed already. Once
        untrusted, the older bar stays."""
        if self.trust in _ELIDES:
            rv = rv if rv is not None else (self.observed_rv or "")
            if self._passed(rv):
                return
            self.untrusted_rv = rv
        self._trust_on(TrustEvent.AMBIGUOUS)

    def _reread_failed(self) -> None:
        """A 409's re-read failed: distrust the observed object until a newer one arrives (the
        next attempt re-reads)."""
        self.untrusted_rv = self.observed_rv or ""
        self._trust_on(TrustEvent.REREAD_FAILED)

    def _trust_on(self, event: TrustEvent) -> None:
        target = _TRUST_NEXT[self.trust].get(event)
        if target is None:
            raise InvalidTransition(f"trust: {event.value} in {self.trust.value} for {self.uid}")
        self.trust = target

    def _is_noop(self, call: Call) -> bool:
        """Whether ``call`` changes nothing: it must hold against the observed object *and*
        against it with the in-flight call applied (that call may land or not). Paused while
        the observed object is not trusted."""
        if self.trust not in _ELIDES or not call.is_noop(self.observed):
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
        trusted = self.trust in _ELIDES
        if idle and entry.judged_obs is self.observed and entry.judged_trust == trusted:
            pass  # elision and staleness (pure) passed against this very state already
        elif self._is_noop(call):
            return Resolve(entry.future, ctype, _SKIPPED)
        elif (reason := call.revalidate(call.basis, self.observed)) is not None:
            error = CallStale(about(call.ref, reason), uid=self.uid, call_type=ctype)
            return Resolve(entry.future, ctype, error)
        if (reason := call.precheck(self.observed)) is not None:
            conflict = CallConflict(about(call.ref, reason), uid=self.uid, call_type=ctype)
            return Resolve(entry.future, ctype, conflict)
        if idle:
            self._judged(entry)
        return None

    def _judged(self, entry: _Entry) -> None:
        """Remember that ``entry`` passed _judge against the current state (nothing in
        flight)."""
        entry.judged_obs = self.observed
        entry.judged_trust = self.trust in _ELIDES

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
        """The object is gone: cancel what waits (a pending deletion succeeded) and say
        ``Retire`` (final once nothing is in flight). Nothing more if it was gone already."""
        if self.state in _GONE:
            return
        for entry in self.queue:
            if entry.call.exclusive:  # a pending deletion: the object is gone, as intended
                out.append(Resolve(entry.future, entry.call.call_type, _SUCCESS))
            else:
                self._fail(out, entry, CallCancelled, why)
        self.queue = []
        out.append(Retire(tombstone=True, final=self.inflight is None))

    def _drop_all(
        self, out: list[Effect], outcome: Outcome | CallOutcomeError | DispatcherClosed
    ) -> None:
        for entry in self.queue:
            out.append(Resolve(entry.future, entry.call.call_type, outcome))
        self.queue = []
        if self.inflight is not None:
            out.append(Resolve(self.inflight.future, self.inflight.call.call_type, outcome))
            self.inflight = self.request = None

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
        error = exc_type(about(entry.call.ref, why), uid=self.uid, call_type=ctype)
        out.append(Resolve(entry.future, ctype, error))

    def _fail_entry(self, out: list[Effect], entry: _Entry, error: CallOutcomeError) -> None:
        out.append(Resolve(entry.future, entry.call.call_type, error))

    def _check(self, name: str) -> None:
        """Refuse an input the current state does not accept, before anything changes."""
        if name not in TRANSITIONS[self.state]:
            raise InvalidTransition(f"{name} in state {self.state.value} for {self.uid}")

    def _drained(self) -> bool:
        """Whether calls waited when this input arrived (the state still says so) and none
        waits now."""
        return not self.queue and self.state in _QUEUED

    def _settle(self, out: list[Effect], event: Event) -> list[Effect]:
        """Take the next state from :data:`TABLE`; in ``PENDING``, ask the executor for a
        grant when the head call holds nothing and the executor does not hold a Ready in its
        lane (or a higher one). The one place that decides readiness."""
        state = _NEXT[self.state].get(event)
        if state is None:
            raise InvalidTransition(f"{event.value} in state {self.state.value} for {self.uid}")
        self.state = state
        if state is _P:
            head = self.queue[0]
            if not head.holds:
                relevance = head.call.relevance
                lane = self.ready_lane
                if lane is None or relevance > lane:
                    self.ready_lane = relevance
                    out.append(Ready(relevance, head.retry.not_before))
        return out
