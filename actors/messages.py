"""Messages exchanged between the facade, the object actors and the executor.

All are immutable slotted dataclasses sent with ``tell``, except ``View``, which callers ``ask``
from threads that may block (never from a pool thread). Object actors and the executor never
block on each other: a call moves Ready → Grant → Job → Done, each a message.
"""

from __future__ import annotations

import enum
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from .calls import Call
from .errors import Outcome
from .objects import Obj


class CallFuture(Future[Outcome]):
    """What ``Dispatcher.submit`` returns: a standard ``concurrent.futures.Future`` whose
    ``result()`` gives an :class:`Outcome` or raises a
    :class:`~kdispatch.actors.errors.CallOutcomeError` /
    :class:`~kdispatch.actors.errors.DispatcherClosed`.

    Only the call's object actor resolves it, exactly once. ``cancel()`` always returns False
    (the call is already in the dispatcher's hands): withdraw a queued call with
    ``Dispatcher.cancel(uid)``, and the future then resolves ``CallCancelled``.
    """

    def cancel(self) -> bool:
        """Any thread. Never cancels (see the class docstring)."""
        return False


# --------------------------------------------------------------------------- to object actors


@dataclass(frozen=True, slots=True)
class Submit:
    """A new call for the object, with the caller's future."""

    call: Call
    future: CallFuture


@dataclass(frozen=True, slots=True)
class Observed:
    """Informer add/update: the newest object."""

    obj: Obj


@dataclass(frozen=True, slots=True)
class Deleted:
    """Informer delete (or a synthetic one after a re-list)."""

    obj: Obj | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Caller cancellation: withdraw the pending call (of ``call_type``, or any)."""

    call_type: str | None = None


@dataclass(frozen=True, slots=True)
class Close:
    """Dispatcher shutdown: resolve everything with ``DispatcherClosed`` and stop."""


@dataclass(frozen=True, slots=True)
class View:
    """Ask: the observed object with in-flight and pending mutations applied (or None)."""


@dataclass(frozen=True, slots=True)
class Grant:
    """From the executor: a token and a worker slot are reserved for this object. The actor
    answers with a :class:`Job` (its current merged call moves to in flight) or a
    :class:`Refund` (nothing to send: merged away, no-op, cancelled, backing off, in flight)."""

    now: float


class Result(enum.Enum):
    """How an attempt ended, as classified by the executor worker."""

    SUCCESS = "success"
    RETRY = "retry"  # retryable error: try again after ``delay``
    CONFLICT = "conflict"  # 409: rebase on ``obj`` (freshly fetched) and retry
    NOT_FOUND = "not_found"
    FAILED = "failed"  # permanent


@dataclass(frozen=True, slots=True)
class Done:
    """An attempt finished (sent by the executor worker to the object actor)."""

    call: Call
    result: Result
    obj: Obj | None = None  # server object (success) or fresh object (conflict)
    error: BaseException | None = None
    delay: float = 0.0  # RETRY: seconds to wait before the next attempt


# --------------------------------------------------------------------------- to the executor


@dataclass(frozen=True, slots=True)
class Job:
    """An object actor's answer to :class:`Grant`: send ``call`` against ``obj`` now."""

    ref: Any  # pykka.ActorRef of the object actor
    call: Call
    obj: Obj | None
    attempt: int  # 1 for the first try
    ready_since: float = 0.0


@dataclass(frozen=True, slots=True)
class Refund:
    """An object actor's answer to :class:`Grant` when it has nothing to send."""

    uid: str


@dataclass(frozen=True, slots=True)
class Ready:
    """An object actor has a call to send (lane = its relevance), not before ``not_before``
    (executor clock)."""

    uid: str
    ref: Any  # pykka.ActorRef of the object actor
    relevance: int
    not_before: float = 0.0
