"""Messages exchanged between the facade, the object actors and the executor.

All are immutable slotted dataclasses sent with ``tell``, except ``View``, which callers ``ask``
from threads that may block (never from a pool thread). The ones made for every call
(:class:`Submit`, :class:`Job`, like the effects ``Ready``/``Send``/``Resolve`` and ``Done`` of
:mod:`.object_state`) are immutable by type rather than frozen: ``Final`` fields, which mypy
enforces, because a frozen dataclass's ``__init__`` sets every field through
``object.__setattr__`` (about 5,000 more instructions per object than plain stores).

Object actors and the executor never block on each other: a call moves ready → grant → job →
done (see :mod:`.executor`).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures._base import FINISHED, PENDING
from dataclasses import dataclass
from typing import Any, Final

from .calls import Call
from .errors import DispatcherClosed, Outcome
from .lazy_condition import CREATE_LOCK, condition_of
from .object_state import NO_HOLDS, Send
from .objects import Obj


class CallFuture(Future[Outcome]):
    """What ``Dispatcher.submit`` returns: a standard ``concurrent.futures.Future`` whose
    ``result()`` gives an :class:`Outcome` or raises a
    :class:`~kdispatch.actors.errors.CallOutcomeError` /
    :class:`~kdispatch.actors.errors.DispatcherClosed`.

    Only the call's object actor resolves it, exactly once. ``cancel()`` always returns False
    (the call is already in the dispatcher's hands): withdraw a queued call with
    ``Dispatcher.cancel(uid)``, and the future then resolves ``CallCancelled``.

    Its ``threading.Condition`` (a lock, a deque and six bound methods: about 1.3 KiB, most of
    a pending call's memory) is created only when somebody waits on it, adds a callback or
    asks for the result before it resolves; a future resolved before anyone looked never has
    one. ``concurrent.futures.wait`` and ``as_completed`` work unchanged (they go through
    ``_condition``). Any thread.
    """

    # Set by the dispatcher that returned the future, so ``after=`` can check and follow it
    # (:mod:`.holds`); class defaults, so an untagged future costs nothing.
    owner: object = None
    call: Call | None = None
    successor: CallFuture | None = None  # a newer call that may overwrite this one (.holds)

    def __init__(self) -> None:
        self._cond: threading.Condition | None = None
        self._state = PENDING
        self._result: Outcome | None = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []

    @property
    def _condition(self) -> threading.Condition:
        """The standard Future's condition, created on first use. Any thread."""
        return condition_of(self)

    @_condition.setter
    def _condition(self, cond: threading.Condition) -> None:
        self._cond = cond

    def __repr__(self) -> str:
        if self._state != FINISHED:
            return f"<{type(self).__name__} at {id(self):#x} state=pending>"
        if self._exception is not None:
            what = f"raised {type(self._exception).__name__}"
        else:
            what = f"returned {self._result!r}"
        return f"<{type(self).__name__} at {id(self):#x} state=finished {what}>"

    def cancel(self) -> bool:
        """Any thread. Never cancels (see the class docstring)."""
        return False

    def cancelled(self) -> bool:
        """Any thread. Always False: a ``CallFuture`` is never cancelled."""
        return False

    def running(self) -> bool:
        """Any thread. Always False (the standard executor state is not used)."""
        return False

    def done(self) -> bool:
        """Any thread. Whether the call resolved (one read of the state, no lock)."""
        return self._state == FINISHED

    def result(self, timeout: float | None = None) -> Outcome:
        """Any thread. As ``Future.result``; once resolved, without taking the condition."""
        if self._state == FINISHED:
            if self._exception is not None:
                raise self._exception
            return self._result  # type: ignore[return-value]
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Any thread. As ``Future.exception``; once resolved, without taking the condition."""
        if self._state == FINISHED:
            return self._exception
        return super().exception(timeout)

    def set_result(self, result: Outcome) -> None:
        """Once, by the one thread that owns the call's resolution: its object actor's, a
        ``ProcessDispatcher``'s reader, or the submitting thread for a call never routed."""
        if not self._finish_unwatched(result, None):
            super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        """Once, by the one thread that resolves the call (see :meth:`set_result`)."""
        if not self._finish_unwatched(None, exception):
            super().set_exception(exception)

    def _finish_unwatched(self, result: Outcome | None, exception: BaseException | None) -> bool:
        """Resolve without a condition if nobody created one (True), else leave it to the
        standard path (False). The condition is created under ``CREATE_LOCK``, which
        this holds while it checks and resolves: a waiter, a callback or
        ``concurrent.futures.wait`` either created the condition first (standard path) or
        creates it after and then reads ``FINISHED`` under it."""
        if self._cond is not None:
            return False
        with CREATE_LOCK:
            if self._cond is not None:
                return False
            if self._state == FINISHED:
                raise InvalidStateError("CallFuture already resolved")
            self._result, self._exception = result, exception
            self._state = FINISHED
        # No callback to run: adding one (add_done_callback) creates the condition first.
        return True


# --------------------------------------------------------------------------- to object actors


@dataclass(slots=True)
class Submit:
    """A new call for the object, with the caller's future. With ``holds`` (opaque tokens of
    prerequisite calls on other objects), the call is admitted at once but not sent before a
    :class:`Release` of every token (see :meth:`.ObjectState.submit`)."""

    call: Final[Call]
    future: Final[CallFuture]
    holds: Final[frozenset[Hashable]] = NO_HOLDS


@dataclass(frozen=True, slots=True)
class Release:
    """A prerequisite succeeded: calls of this object held on ``token`` lose that hold."""

    token: Hashable


@dataclass(frozen=True, slots=True)
class FailDependency:
    """A prerequisite failed or was cancelled: calls of this object held on ``token`` resolve
    :class:`~.errors.DependencyFailed` with ``cause`` and are never sent."""

    token: Hashable
    cause: BaseException


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
class Revoke:
    """Leadership lost: resolve every call not yet sent with ``error``."""

    error: DispatcherClosed


@dataclass(frozen=True, slots=True)
class Grant:
    """From the executor: a token and a worker slot are reserved for this object. The actor
    answers with :meth:`Executor.job` (its current head call, or the re-read it needs, moves
    to in flight) or :meth:`Executor.refund` (nothing to send)."""

    now: float


# --------------------------------------------------------------------------- to the executor


@dataclass(slots=True)
class Job:
    """An object actor's answer to a grant: carry out ``send``, then tell ``ref`` the
    :class:`~kdispatch.actors.object_state.Done`."""

    ref: Final[Any]  # pykka.ActorRef of the object actor
    send: Final[Send]
