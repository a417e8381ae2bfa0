"""What the per-object rules ask their actor to do (effects), and how a request ended
(:class:`Done`): values, equal by value and never changed once built (those built for every
call are slotted dataclasses, not frozen, which build faster). Pure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

from .calls import Call, CallTypeSpec
from .errors import CallCancelled, CallOutcomeError, DependencyFailed, DispatcherClosed, Outcome
from .objects import Obj, ObjectRef

__all__ = [
    "Done",
    "Effect",
    "Merged",
    "Ready",
    "Rebased",
    "Refund",
    "Resolve",
    "Result",
    "Retire",
    "Send",
    "about",
    "dependency_failed",
    "when_gone",
]


@dataclass(slots=True)
class Resolve:
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


@dataclass(slots=True)
class Send:
    """Answer to a grant: perform ``call`` against ``obj``; with ``read``, only re-read the
    object (one GET) so the call can be computed against a trusted object; with ``verify``
    too, the read is the last one of a call one of whose requests went unanswered: the object
    comes back as read (whatever its UID), for :meth:`~.calls.Call.landed` to judge."""

    call: Call
    obj: Obj | None
    attempt: int
    read: bool = False
    verify: bool = False
    failures: int = 0  # the call's retryable failures so far: the next backoff doubles them


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


@dataclass(slots=True)
class Done:
    """The end of the request in flight, as the executor classified it."""

    call: Call
    result: Result
    obj: Obj | None = None
    error: BaseException | None = None
    delay: float = 0.0
    applied: bool = True
    """Whether the server may have applied a request of the attempt; False when its first
    request was refused before it was handled (a 429, or a 409 whatever its re-read met), so the
    object is still as observed and no request of it went unanswered."""


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


def when_gone(call: Call | CallTypeSpec, cancelled: CallCancelled) -> Outcome | CallCancelled:
    """How ``call`` (or a call of that type) ends unsent because its object is gone (deleted
    before the call was sent, or before it was even admitted): a deletion got its way,
    ``SUCCESS``, as after a 404; anything else is ``cancelled``. The one spelling of it,
    whether the object's rules, its actor or the submitting thread resolves the call. Pure."""
    return Outcome.SUCCESS if call.exclusive else cancelled
