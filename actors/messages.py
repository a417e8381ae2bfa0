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

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from loguru import logger

from ._compat import LazyFuture
from .calls import Call
from .errors import CallCancelled, DispatcherClosed, Outcome
from .object_state import NO_HOLDS, Send
from .objects import Obj


class StepWatcher(Protocol):
    """The group of a step's future (a :class:`~.groups.CallGroup`): told once the step
    resolved, and asked by the step's actor when its ``Submit`` arrives."""

    def _step_done(self, future: CallFuture) -> None: ...

    def refusal(self, call: Call, held: bool) -> CallCancelled | None: ...


class CallFuture(LazyFuture[Outcome]):
    """What ``Dispatcher.submit`` returns: a standard ``concurrent.futures.Future`` whose
    ``result()`` gives an :class:`Outcome` or raises a
    :class:`~kdispatch.actors.errors.CallOutcomeError` /
    :class:`~kdispatch.actors.errors.DispatcherClosed`.

    Only the call's object actor resolves it, exactly once (``set_result``/``set_exception``:
    by its object actor's thread, a ``ProcessDispatcher``'s reader, or the submitting thread
    for a call never routed). ``cancel()`` always returns False (the call is already in the
    dispatcher's hands): withdraw a queued call with ``Dispatcher.cancel(uid)``, and the
    future then resolves ``CallCancelled``.

    Its ``threading.Condition`` (most of a pending call's memory) is created only when
    somebody adds a callback or waits through ``concurrent.futures.wait``/``as_completed``;
    ``result()`` before it resolves waits on a lock of its own
    (:class:`~kdispatch.actors._compat.LazyFuture`). Any thread.
    """

    # Set by the dispatcher that returned the future, so ``after=`` can check and follow it
    # (:mod:`.holds`); class defaults, so an untagged future costs nothing.
    owner: object = None
    call: Call | None = None
    # Set by the object's actor before it resolves the future OVERWRITTEN: the newer call that
    # carries its intent (prerequisites are followed to it, :mod:`.holds`).
    successor: CallFuture | None = None
    # Set by the dispatcher before a group's step can resolve: the group, told once the future
    # resolved, on the resolving thread, after the done-callbacks (a tag rather than a
    # done-callback, which would create the future's condition).
    group: StepWatcher | None = None
    # Set by the dispatcher that handed the future out, before anything can resolve it: the
    # counter of unresolved calls of its lane (:class:`~.dispatcher_like.Backlog`), popped
    # once by whoever resolves the future on the dispatcher's behalf.
    lane: deque[None] | None = None

    def set_result(self, result: Outcome) -> None:
        """Once, by the one thread that resolves the future; then its group learns of it."""
        super().set_result(result)
        if self.group is not None:
            self._tell_group(self.group)

    def set_exception(self, exception: BaseException | None) -> None:
        """Once, by the one thread that resolves the future; then its group learns of it."""
        super().set_exception(exception)
        if self.group is not None:
            self._tell_group(self.group)

    def _tell_group(self, group: StepWatcher) -> None:
        """Resolving thread: as a done-callback would, an error is logged, not raised."""
        try:
            group._step_done(self)
        except Exception:
            logger.opt(exception=True).error("call group failed to take the step {}", self)


# --------------------------------------------------------------------------- to object actors


@dataclass(slots=True)
class Submit:
    """A new call for the object, with the caller's future. With ``holds`` (opaque tokens of
    prerequisite calls), the call is admitted at once but not sent before a :class:`Release`
    of every token, and never queued ahead of the calls of ``behind`` (futures of calls on
    this object it waits for; see :meth:`.ObjectState.submit`)."""

    call: Final[Call]
    future: Final[CallFuture]
    holds: Final[frozenset[Hashable]] = NO_HOLDS
    behind: Final[frozenset[Any]] = NO_HOLDS  # calls on this object the held call waits for


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
class Withdraw:
    """Withdraw the one call of ``future`` (and no other): see :meth:`.ObjectState.withdraw`.
    ``cause``: why (a call group's cancellation), or None (the caller)."""

    future: CallFuture
    cause: CallCancelled | None = None


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
