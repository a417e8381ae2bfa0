"""Prerequisites of held calls: the dispatcher's side of ``submit(call, after=...)``
(docs/groups.md tells the rules, "Cycles" included).

A held call goes to its actor at once with an opaque :class:`Hold` token, which keeps it unsent.
Once every prerequisite (this dispatcher's futures, or a :class:`GroupFuture`) succeeded, the
actor is told :class:`~.messages.Release`; at the first failure,
:class:`~.messages.FailDependency`. An ``OVERWRITTEN`` prerequisite is followed to the call that
carries its intent. :meth:`Dependencies.hold` checks for a cycle and registers under one lock.

Threads: ``hold``/``arm``/``fail`` on the submitting (or cancelling) thread, the callbacks on the
thread that resolves a future. Messages are told outside the lock.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from threading import Lock
from typing import Any, Final, TypeAlias, TypeVar

from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.effects import dependency_failed
from kdispatch.actors.model.errors import DependencyCycleError, InvalidPrerequisiteError, Outcome
from kdispatch.actors.model.objects import ObjectRef
from kdispatch.actors.model.queue_policy import NO_HOLDS

from .aio import ASYNC_SOURCE
from .messages import CallFuture, FailDependency, Release, Uncancellable
from .metrics import Metrics

__all__ = [
    "Dependencies",
    "GroupFuture",
    "GroupSteps",
    "Hold",
    "HoldState",
    "OneOrMore",
    "as_tuple",
    "dependency_failed",
    "overwritten",
    "packed",
]

T = TypeVar("T")

_OVERWRITTEN: Final = Outcome.OVERWRITTEN

Prerequisite = Future[Any]


class GroupFuture(Uncancellable[list[Outcome]]):
    """``CallGroup.future``: resolves once the group is sealed and every step resolved, to the
    list of outcomes (in step order), or raises :class:`~.errors.GroupFailed`. It may be given
    as a prerequisite (``after=[group.future]``) of this dispatcher's calls, which then also
    wait for the calls its ``OVERWRITTEN`` steps were merged into. Never cancelled."""

    owner: object = None  # the dispatcher of the group
    of: ObjectRef | None = None  # the group's owner object
    group: GroupSteps | None = None  # the group's steps (for the cycle checks)

    def __repr__(self) -> str:
        ref = self.of
        owner = "" if ref is None else f"{ref.kind} {ref.namespace}/{ref.name}"
        return f"<GroupFuture {owner} state={'finished' if self.done() else 'pending'}>"


OneOrMore: TypeAlias = T | tuple[T, ...]
"""A value kept alone, or a tuple of several (or none): where there is almost always one,
as a group's steps or an owner's groups, no container is built for it."""


def as_tuple(items: OneOrMore[T]) -> tuple[T, ...]:
    """``items`` (see :data:`OneOrMore`) as a tuple."""
    return items if isinstance(items, tuple) else (items,)


def packed(items: tuple[T, ...]) -> OneOrMore[T]:
    """``items`` as :data:`OneOrMore` keeps them: one item alone."""
    return items[0] if len(items) == 1 else items


class GroupSteps:
    """What :class:`Dependencies` keeps of a call group (a ``CallGroup`` is one): its steps in
    registration order (:data:`OneOrMore`), and its future once somebody asked for it (until
    then the group is nobody's prerequisite and closes no cycle). ``lock`` guards the fields;
    :class:`Dependencies` takes its own lock, then this one."""

    __slots__ = ("_future", "_lock", "_steps")

    def __init__(self, lock: Lock | None = None) -> None:
        self._future: GroupFuture | None = None
        self._lock = Lock() if lock is None else lock
        self._steps: OneOrMore[CallFuture] = ()

    def bind(self, future: GroupFuture) -> None:
        """Once, before ``future`` is handed out: it is this group's future."""
        future.group = self
        self._future = future

    def add_step(self, future: CallFuture) -> None:
        """Any thread (the submitting one, before the step's future can resolve): ``future``
        is the group's next step."""
        with self._lock:
            self._append(future)

    def add_unwatched_step(self, future: CallFuture) -> bool:
        """Submitting thread: :meth:`add_step` if this group's future does not exist yet
        (True: the step closes no cycle); else nothing (False: the step goes through
        :meth:`Dependencies.hold`, which checks for a cycle first)."""
        with self._lock:
            if self._future is not None:
                return False
            self._append(future)
        return True

    def _append(self, future: CallFuture) -> None:
        """Under the lock: register ``future`` as the last step (``CallGroup`` implements it)."""
        raise NotImplementedError

    def drop_step(self, future: CallFuture) -> None:
        """Any thread: ``future`` is not a step (its submit raised)."""
        with self._lock:
            self._steps = packed(tuple(s for s in as_tuple(self._steps) if s is not future))

    def step_futures(self) -> tuple[CallFuture, ...]:
        """Any thread: the steps, in order (one atomic read)."""
        return as_tuple(self._steps)


class HoldState(enum.Enum):
    """Where a held call's prerequisites stand (see :class:`Hold`)."""

    WAITING = "waiting"  # some prerequisite not resolved yet
    RELEASED = "released"  # all succeeded: Release told
    FAILED = "failed"  # one failed (or the group was cancelled): FailDependency told
    DONE = "done"  # the held call resolved first (deleted, preempted, closed ...)


@dataclass(slots=True, eq=False)
class Hold:
    """The hold token of one held call (hashed by identity) and its bookkeeping. Fields are
    changed under :class:`Dependencies`' lock."""

    uid: str
    call_type: str
    future: CallFuture
    prereqs: tuple[Prerequisite, ...]
    behind: frozenset[CallFuture]  # calls on its object it waits for (transitively): never passed
    waiting: int = field(init=False)  # prerequisites not resolved yet
    state: HoldState = HoldState.WAITING
    armed: bool = False  # the Submit carrying this token was told to the actor
    cause: BaseException | None = None

    def __post_init__(self) -> None:
        self.waiting = len(self.prereqs)

    def __repr__(self) -> str:
        return f"<Hold {self.call_type} {self.uid} {self.state.value} waiting={self.waiting}>"


Tell = Callable[[str, object], object]


def check_after(after: object) -> Iterable[object]:
    """Caller thread. ``after`` (of a ``submit``) if it is an iterable (its items are checked
    as they are read), else :class:`InvalidPrerequisiteError`: one future, a str ... ."""
    if isinstance(after, str | bytes | Future | asyncio.Future) or not isinstance(after, Iterable):
        raise InvalidPrerequisiteError(
            f"after must be an iterable of futures, got {type(after).__name__}"
        )
    return after


class Dependencies:
    """The ``after=`` edges of one dispatcher: held calls, their prerequisites, the open call
    groups' steps, and the messages that release or fail held calls. Any thread."""

    def __init__(self, owner: object, tell: Tell, metrics: Metrics) -> None:
        self._owner = owner
        self._tell = tell
        self._metrics = metrics
        self._lock = Lock()
        self._holds: dict[CallFuture, Hold] = {}  # held calls not resolved yet
        self._held_on: dict[str, set[CallFuture]] = {}  # uid -> its held calls (queue edges)

    # ------------------------------------------------------------------ validation

    def prerequisites(self, after: object) -> tuple[Prerequisite, ...]:
        """Caller thread. ``after`` as a tuple of this dispatcher's futures (asyncio futures of
        ``asubmit`` unwrapped); :class:`InvalidPrerequisiteError` otherwise."""
        out: list[Prerequisite] = []
        for item in check_after(after):
            fut = getattr(item, ASYNC_SOURCE, item) if isinstance(item, asyncio.Future) else item
            if isinstance(fut, CallFuture | GroupFuture):
                if fut.owner is self._owner:
                    if fut not in out:
                        out.append(fut)
                    continue
                raise InvalidPrerequisiteError(
                    f"{fut!r} belongs to another dispatcher (or none): after= takes this "
                    "dispatcher's futures"
                )
            raise InvalidPrerequisiteError(
                f"after= takes futures returned by this dispatcher (or a group's future), got "
                f"{type(item).__name__}"
            )
        return tuple(out)

    # ------------------------------------------------------------------ holding

    def hold(
        self,
        call: Call,
        future: CallFuture,
        prereqs: tuple[Prerequisite, ...],
        group: GroupSteps | None = None,
    ) -> Hold | BaseException | None:
        """Submitting thread, before the call goes to its actor: check for a cycle
        (:class:`DependencyCycleError`) and register ``future`` (as a step of ``group`` too).
        Returns the :class:`Hold` to submit with (then :meth:`arm`), None when every
        prerequisite already succeeded, or the error of one that already failed."""
        uid = call.ref.uid
        with self._lock:
            waiting: list[Prerequisite] = []
            for prereq in prereqs:
                fut = _follow(prereq)
                for carrier in _carried(fut) or (fut,):  # a group's merged steps: their calls
                    if not carrier.done():
                        if carrier not in waiting:
                            waiting.append(carrier)
                    elif (exc := carrier.exception()) is not None:
                        if group is not None:  # a step all the same, resolved at once
                            group.add_step(future)
                        return exc
            if group is not None:
                self._check_group_step(uid, group)
            hold = None
            if waiting:
                behind = self._check_prereqs(call, waiting, group)
                hold = Hold(uid, call.call_type, future, tuple(waiting), behind)
                self._holds[future] = hold
                self._held_on.setdefault(uid, set()).add(future)
                self._metrics.held_delta(call.call_type, 1)
            if group is not None:
                group.add_step(future)
        return hold

    def held_on_one(self, futures: Iterable[CallFuture]) -> list[CallFuture]:
        """Any thread: those of ``futures`` whose hold waits for one prerequisite only (a
        gang's members held on nothing but its gate)."""
        with self._lock:
            holds = self._holds
            return [
                f
                for f in futures
                if (hold := holds.get(f)) is not None
                and hold.state is HoldState.WAITING
                and hold.waiting == 1
            ]

    def arm(self, hold: Hold) -> None:
        """Submitting thread, right after the held call's ``Submit`` was told: watch its
        prerequisites (so the actor always learns of the token before its release)."""
        hold.future.add_done_callback(partial(self._held_done, hold))
        with self._lock:
            hold.armed = True
            state, cause = hold.state, hold.cause
        if state is HoldState.FAILED and cause is not None:
            # failed (its group cancelled) before the actor knew the token
            self._tell(hold.uid, FailDependency(hold, cause))
        if state is not HoldState.WAITING:
            return
        for fut in hold.prereqs:
            fut.add_done_callback(partial(self._prereq_done, hold))

    def fail(self, future: CallFuture, cause: BaseException) -> bool:
        """Any thread: fail the hold of ``future`` with ``cause`` (it resolves
        ``DependencyFailed``, unsent); False if it is not held (or no longer)."""
        with self._lock:
            hold = self._holds.get(future)
            if hold is None or hold.state is not HoldState.WAITING:
                return False
            self._leave(hold, HoldState.FAILED)
            hold.cause = cause
            armed = hold.armed
            if hold.future.done():  # overwritten: its token was all that was left of it
                self._forget(hold)
        if armed:
            self._tell(hold.uid, FailDependency(hold, cause))
        return True

    def discard(self, future: CallFuture, group: GroupSteps | None = None) -> None:
        """Submitting thread: forget ``future``, whose submit raised."""
        with self._lock:
            hold = self._holds.get(future)
            if hold is not None:
                if hold.state is HoldState.WAITING:
                    self._leave(hold, HoldState.DONE)
                self._forget(hold)
            if group is not None:
                group.drop_step(future)

    @property
    def held(self) -> int:
        """Held calls whose prerequisites have not all resolved. Any thread."""
        with self._lock:
            return sum(1 for h in self._holds.values() if h.state is HoldState.WAITING)

    # ------------------------------------------------------------------ callbacks

    def _prereq_done(self, hold: Hold, fut: Prerequisite) -> None:
        """Resolving thread of a prerequisite."""
        nxt = _follow(fut)
        if nxt is not fut:  # overwritten by a newer call: wait for that one instead
            nxt.add_done_callback(partial(self._prereq_done, hold))
            return
        carried = _carried(fut)
        if carried:  # a group whose steps were merged away: wait for the calls that carry them
            with self._lock:
                if hold.state is not HoldState.WAITING:
                    return
                hold.waiting += len(carried) - 1
            for carrier in carried:
                carrier.add_done_callback(partial(self._prereq_done, hold))
            return
        message: Release | FailDependency
        with self._lock:
            if hold.state is not HoldState.WAITING:
                return
            exc = fut.exception()
            if exc is None:
                hold.waiting -= 1
                if hold.waiting:
                    return
                self._leave(hold, HoldState.RELEASED)
                message = Release(hold)
            else:
                self._leave(hold, HoldState.FAILED)
                hold.cause = exc
                message = FailDependency(hold, exc)
            if hold.future.done():  # overwritten: its token was all that was left of it
                self._forget(hold)
        self._tell(hold.uid, message)

    def _held_done(self, hold: Hold, fut: CallFuture) -> None:
        """Resolving thread of the held call: forget it, unless it was merged into a newer
        call (``OVERWRITTEN``) that now holds its token."""
        merged = overwritten(fut)
        with self._lock:
            if hold.state is HoldState.WAITING:
                if merged:
                    return
                self._leave(hold, HoldState.DONE)
            self._forget(hold)

    def _forget(self, hold: Hold) -> None:
        """Under the lock: drop the bookkeeping of a held call that resolved."""
        self._holds.pop(hold.future, None)
        held = self._held_on.get(hold.uid)
        if held is not None:
            held.discard(hold.future)
            if not held:
                del self._held_on[hold.uid]

    def _leave(self, hold: Hold, state: HoldState) -> None:
        """Under the lock: the hold stops waiting (the held-calls gauge moves)."""
        hold.state = state
        self._metrics.held_delta(hold.call_type, -1)

    # ------------------------------------------------------------------ cycles (under the lock)

    def _check_prereqs(
        self, call: Call, waiting: list[Prerequisite], group: GroupSteps | None
    ) -> frozenset[CallFuture]:
        """The calls on ``call``'s own object its prerequisites reach (its ``behind``), or
        :class:`DependencyCycleError` for a wait that would close a circle."""
        uid = call.ref.uid
        behind: list[CallFuture] = []
        gf = group._future if group is not None else None
        for fut in self._closure(waiting):
            if gf is not None and fut is gf:
                raise DependencyCycleError(
                    "the call's prerequisites wait for the group it joins (its own step)"
                )
            other = fut.call if isinstance(fut, CallFuture) else None
            if other is None or other.ref.uid != uid:
                continue
            if call.exclusive:
                raise DependencyCycleError(
                    f"{uid}: the call's prerequisites wait for {other.describe()}, a call not "
                    f"yet resolved on the same object, which {call.call_type} (exclusive) "
                    "would cancel; submit the exclusive call once that call has resolved, or "
                    "leave that call out"
                )
            if other.call_type == call.call_type:
                raise DependencyCycleError(
                    f"{uid}: the call's prerequisites wait for {other.describe()}, a call not "
                    "yet resolved on the same object and of the same type, which the call would "
                    "merge with and then wait for itself; submit one call with both changes"
                )
            behind.append(fut)  # type: ignore[arg-type]
        return frozenset(behind) if behind else NO_HOLDS

    def _check_group_step(self, uid: str, group: GroupSteps) -> None:
        gf = group._future
        if gf is None:  # nobody's prerequisite
            return
        start = list(self._held_on.get(uid, ()))
        if start and any(fut is gf for fut in self._closure(start)):
            raise DependencyCycleError(
                f"a held call on {uid} waits for this group: a step on {uid} would queue "
                "behind it and the group would wait for itself"
            )

    def _closure(self, start: Iterable[Prerequisite]) -> Iterator[Prerequisite]:
        """Every unresolved future reachable from ``start``: a held call's prerequisites,
        a group's unresolved steps, and an object's held calls (queue edges)."""
        seen: set[int] = set()
        stack = list(start)
        while stack:
            fut = stack.pop()
            if id(fut) in seen:
                continue
            if fut.done():
                nxt = _follow(fut)  # overwritten: its intent waits in the newer call
                if nxt is not fut:
                    stack.append(nxt)
                stack.extend(_carried(fut))  # a group's steps merged into newer calls
                continue
            seen.add(id(fut))
            yield fut
            if isinstance(fut, GroupFuture):
                if fut.group is not None:  # resolved steps: followed if merged away
                    stack.extend(fut.group.step_futures())
                continue
            hold = self._holds.get(fut) if isinstance(fut, CallFuture) else None
            if hold is not None:
                stack.extend(hold.prereqs)
            call = fut.call if isinstance(fut, CallFuture) else None
            if call is not None:
                stack.extend(self._held_on.get(call.ref.uid, ()))


def _follow(fut: Prerequisite) -> Prerequisite:
    """The call that carries ``fut``'s intent now: ``fut`` itself, or, if it resolved
    ``OVERWRITTEN``, the newer call its actor named as its ``successor`` (transitively). Any
    thread."""
    while isinstance(fut, CallFuture) and fut.successor is not None and overwritten(fut):
        fut = fut.successor
    return fut


def _carried(fut: Prerequisite) -> list[Prerequisite]:
    """For a call group's future resolved as a success: the calls that carry the intents of
    its steps merged into newer calls (``OVERWRITTEN``, followed as :func:`_follow` does) and
    have not succeeded yet; else none. What a call held on that future still waits for, as it
    would for each step given in ``after=``. Any thread."""
    group = fut.group if isinstance(fut, GroupFuture) else None
    if group is None or not fut.done() or fut.exception() is not None:
        return []
    out: list[Prerequisite] = []
    for step in group.step_futures():
        if overwritten(step):
            carrier = _follow(step)
            if carrier is step or (carrier.done() and carrier.exception() is None):
                continue
            if all(carrier is not c for c in out):
                out.append(carrier)
    return out


def overwritten(future: Future[Any]) -> bool:
    """Whether ``future`` resolved ``OVERWRITTEN``: merged into a newer call, which carries its
    intent. Any thread."""
    return future.done() and future.exception() is None and future.result() is _OVERWRITTEN
