"""The call's future, and the messages between the facade, the object actors and the executor.

Messages are slotted dataclasses, frozen but for the per-call :class:`Submit` (never changed
either: a frozen one takes three times as long to build), sent with ``Actor.tell``; a call
moves ready → grant → job → done (see :mod:`.executor`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from loguru import logger

from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.errors import CallCancelled, DispatcherClosed, Outcome
from kdispatch.actors.model.objects import Obj
from kdispatch.actors.model.queue_policy import NO_HOLDS

_T = TypeVar("_T")

__all__ = [
    "CallFuture",
    "Cancel",
    "Close",
    "Confirm",
    "Deleted",
    "FailDependency",
    "Grant",
    "Observed",
    "Release",
    "Revoke",
    "Submit",
    "Uncancellable",
    "View",
    "Withdraw",
    "settle",
]


class StepWatcher(Protocol):
    """The group of a step's future (a :class:`~.groups.CallGroup`): told once the step
    resolved, and asked by the step's actor when its ``Submit`` arrives."""

    def _step_done(self, future: CallFuture) -> None: ...

    def _refusal(self, call: Call, held: bool) -> CallCancelled | None: ...


class Uncancellable(Future[_T]):
    """A standard ``concurrent.futures.Future`` that is never cancelled: what it waits for is
    in the dispatcher's hands and resolves exactly once. Any thread."""

    def cancel(self) -> bool:
        """Never cancels: always False. Any thread."""
        return False


class CallFuture(Uncancellable[Outcome]):
    """What ``Dispatcher.submit`` returns: a standard ``concurrent.futures.Future`` whose
    ``result()`` gives an :class:`Outcome` or raises a :class:`~kdispatch.CallOutcomeError`
    or :class:`~kdispatch.DispatcherClosed`, resolved exactly once. ``cancel()`` always
    returns False (withdraw a queued call with ``Dispatcher.cancel``). Any thread."""

    # Class defaults, so an untagged future costs nothing. Set by its dispatcher (after=):
    owner: object = None
    call: Call | None = None
    # Set before it resolves OVERWRITTEN: the newer call that carries its intent.
    successor: CallFuture | None = None
    # Set for a group's step before it can resolve: the group, told once it resolved.
    group: StepWatcher | None = None
    # Set by its dispatcher before anything can resolve it: its lane's counter of unresolved
    # calls (``Backlog``), popped once by whoever resolves it on the dispatcher's behalf.
    lane: deque[None] | None = None


def settle(future: Future[Any], outcome: Outcome | BaseException) -> bool:
    """The one way a call's future resolves: with ``outcome`` (a result, or an exception to
    raise), then its group is told if it is a step. False, with nothing changed, if it was
    resolved already. The resolving thread."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except InvalidStateError:
        return False
    group = getattr(future, "group", None)
    if group is not None:
        try:
            group._step_done(future)
        except Exception:  # as a done-callback: logged, never raised into the resolver
            logger.opt(exception=True).error("call group failed to take the step {}", future)
    return True


# --------------------------------------------------------------------------- to object actors


@dataclass(slots=True)
class Submit:
    """A new call for the object, with the caller's future. With ``holds`` (tokens of
    prerequisite calls), it is admitted at once but not sent before a :class:`Release` of
    every token, and never queued ahead of the calls of ``behind`` (futures it waits for)."""

    call: Call
    future: CallFuture
    holds: frozenset[Hashable] = NO_HOLDS
    behind: frozenset[Any] = NO_HOLDS


@dataclass(frozen=True, slots=True)
class Release:
    """A prerequisite succeeded: calls of this object held on ``token`` lose that hold."""

    token: Hashable


@dataclass(frozen=True, slots=True)
class FailDependency:
    """A prerequisite failed or was cancelled: calls held on ``token`` resolve
    ``DependencyFailed`` with ``cause`` and are never sent."""

    token: Hashable
    cause: BaseException


@dataclass(frozen=True, slots=True)
class Confirm:
    """A gang's release asks a member's actor to call ``answer()`` on its turn: every message
    told to the actor before this one (the member's ``Submit``, the pod's deletion ...) was
    handled, so a member refused or deleted by then has resolved."""

    answer: Callable[[], None]


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
    """Caller cancellation: withdraw the pending calls (of ``call_type``, or any)."""

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
    """The observed object with in-flight and pending mutations applied (or None), answered
    into ``reply``."""

    reply: Future[Obj | None]


@dataclass(frozen=True, slots=True)
class Revoke:
    """Leadership lost: resolve every call not yet sent with ``error``."""

    error: DispatcherClosed


@dataclass(frozen=True, slots=True)
class Reap:
    """From the reaper: leave if idle."""


@dataclass(frozen=True, slots=True)
class Grant:
    """From the executor: a token and a worker slot are reserved for this object; the actor
    answers with ``Executor.job`` or ``Executor.refund``."""

    now: float
