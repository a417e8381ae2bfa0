"""Call groups: steps on any objects that live and die with one owner object
(docs/groups.md tells the rules).

Threads: every public method may be called from any thread (``asubmit``/``apreempt`` from a
running event loop); callbacks run on the thread that resolves a step. A group takes one of its
dispatcher's group locks, picked by its owner's UID; :class:`OwnerIndex` finds it by that UID.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable
from threading import Lock
from types import TracebackType
from typing import Final, Protocol, Self, Unpack

from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.errors import (
    CallCancelled,
    GroupClosedError,
    GroupFailed,
    ObjectNotFound,
    Outcome,
)
from kdispatch.actors.model.objects import ObjectRef
from kdispatch.actors.model.pod_calls import PodPreemption, PreemptionOptions, preemption_options

from .aio import running_loop, wrap_call_future
from .holds import (
    GroupFuture,
    GroupSteps,
    OneOrMore,
    as_tuple,
    dependency_failed,
    overwritten,
    packed,
)
from .messages import CallFuture

__all__ = ["CANCEL_CAUSES", "CallGroup", "GroupHost", "OwnerIndex"]

CANCEL_CAUSES = (
    "caller",
    "owner_deleted",
    "owner_preempted",
    "owner_not_found",
    "owner_withdrawn",
    "member_failed",
    "stopped",
)
"""Labels of ``kdispatch_call_groups_cancelled_total`` and :attr:`GroupFailed.cancelled`."""


class GroupHost(Protocol):
    """What a group needs of its dispatcher (:class:`~.dispatcher.Dispatcher`)."""

    def submit_step(self, call: Call, after: Iterable[object], group: CallGroup) -> CallFuture: ...

    def refuse_step(self, call: Call, after: Iterable[object], group: CallGroup) -> CallFuture: ...

    def withdraw(self, future: CallFuture, cause: CallCancelled) -> None: ...

    def group_cancelled(self, group: CallGroup, cause: str) -> None: ...

    def group_resolved(self, group: CallGroup) -> None: ...

    def confirm_member(self, future: CallFuture, answer: Callable[[], None]) -> None: ...

    def reserve_block(self, members: Collection[CallFuture]) -> None: ...

    def leave_block(self, uid: str) -> None: ...


_SEALED: Final = 1  # no more steps: the group resolves with its last step
_CLOSING: Final = 2  # sealed by the dispatcher's stop or revoke
_FINISHED: Final = 4  # resolved (its future is set)
_OWNER_SHARED: Final = 8  # ``owner`` is the ObjectRef of a step's call (see ``_append``)


class CallGroup(GroupSteps):
    """Steps on any objects that live and die with ``owner``. Build it with
    ``Dispatcher.group(owner=obj)``. ``cancel()``, or the owner's deletion, preemption or a 404
    on a step on it, withdraws every step not yet on the wire (exactly: another caller's intent
    merged with a step is kept); :attr:`future` resolves once the group is sealed and every
    step resolved. A ``with`` block seals it at its end (docs/groups.md has examples)."""

    __slots__ = ("_cancelled", "_cause", "_first", "_flags", "_host", "_unresolved", "owner")

    def __init__(self, host: GroupHost, owner: ObjectRef, lock: Lock) -> None:
        """``lock`` guards the group's fields: one of the dispatcher's group locks, which other
        groups share (held only briefly, never while calling out or taking another lock)."""
        super().__init__(lock)
        self.owner = owner
        self._host = host
        # steps registered (``add_step``) and not resolved
        self._unresolved = 0
        self._first: BaseException | None = None
        self._flags = 0  # _SEALED, _CLOSING, _FINISHED, _OWNER_SHARED
        self._cancelled: str | None = None
        self._cause: CallCancelled | None = None

    def __repr__(self) -> str:
        if self._flags & _FINISHED:
            state = "resolved"
        elif self._cancelled:
            state = f"cancelled={self._cancelled}"
        else:
            state = "sealed" if self._flags & _SEALED else "open"
        return f"<CallGroup of {self.owner} steps={len(self.step_futures())} {state}>"

    # ------------------------------------------------------------------ steps

    def submit(self, call: Call, *, after: Iterable[object] = ()) -> CallFuture:
        """Any thread. Add a step (see ``Dispatcher.submit`` for ``after=``). Raises what
        ``Dispatcher.submit`` raises, :class:`~.errors.DependencyCycleError` if ``after``
        waits for this group, and :class:`~.errors.GroupClosedError` once sealed. In a
        cancelled group the step is not sent: its future resolves ``CallCancelled`` at once."""
        # No lock: cancel_for sets _cancelled before _flags. A cancellation after these reads
        # withdraws the step once registered, or the actor refuses it (``_refusal``).
        flags = self._flags
        if flags & _SEALED and self._cancelled is None and not flags & _CLOSING:
            raise GroupClosedError(f"{self!r} is sealed: start another group")
        if self._cause is not None:
            return self._host.refuse_step(call, after, self)
        return self._host.submit_step(call, after, self)

    def preempt(
        self, victim: object, *, after: Iterable[object] = (), **options: Unpack[PreemptionOptions]
    ) -> CallFuture:
        """Any thread. Add a step that preempts ``victim`` (see ``Dispatcher.preempt`` for the
        ``options``), held until ``after`` succeeded (e.g. the preemptor's nomination)."""
        preemption = PodPreemption.for_pod(victim, **preemption_options(options))
        return self.submit(preemption, after=after)

    def asubmit(self, call: Call, *, after: Iterable[object] = ()) -> asyncio.Future[Outcome]:
        """Event-loop thread. :meth:`submit` for asyncio code: the step's outcome as an
        ``asyncio.Future`` on the running loop (it may be given in ``after=`` too)."""
        loop = running_loop("CallGroup.asubmit()")
        return wrap_call_future(self.submit(call, after=after), loop)

    def apreempt(
        self, victim: object, *, after: Iterable[object] = (), **options: Unpack[PreemptionOptions]
    ) -> asyncio.Future[Outcome]:
        """Event-loop thread. :meth:`preempt` for asyncio code."""
        loop = running_loop("CallGroup.apreempt()")
        return wrap_call_future(self.preempt(victim, after=after, **options), loop)

    # ------------------------------------------------------------------ life

    def seal(self) -> None:
        """Any thread. No more steps: ``future`` resolves once every step has. Idempotent."""
        self._seal(closing=False)

    def _seal(self, *, closing: bool, revoking: bool = False, draining: bool = True) -> None:
        """Seal; with ``closing`` (the dispatcher stops, ``draining`` its calls or not, or is
        revoked: ``revoking``), a later ``submit`` raises the dispatcher's error instead of
        :class:`GroupClosedError`."""
        del revoking, draining  # the steps' actors resolve them with the dispatcher's error
        with self._lock:
            self._flags |= (_SEALED | _CLOSING) if closing else _SEALED
        self._maybe_finish()

    def _revoked(self, error: BaseException) -> None:
        """``revoke``, once every actor was told the revocation: nothing more to do (a
        gang's gate fails)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Seal the group; if the block raised, cancel it first (``"caller"``)."""
        if exc is not None:
            self.cancel()
        self.seal()

    def cancel(self) -> bool:
        """Any thread. Withdraw every step not yet on the wire and seal the group. Returns
        False if it was already cancelled or resolved."""
        return self.cancel_for("caller")

    def cancel_for(self, cause: str) -> bool:
        """Any thread. :meth:`cancel` with a cause label (one of :data:`CANCEL_CAUSES`)."""
        with self._lock:
            if self._cancelled is not None or self._flags & _FINISHED:
                return False
            self._cancelled = cause  # before _flags (see submit)
            self._flags |= _SEALED
            error = CallCancelled(f"call group of {self.owner} cancelled ({cause})", ref=self.owner)
            self._cause = error
            # a step may still be sent while it is pending, or merged into a newer call
            steps = [f for f in self.step_futures() if not f.done() or overwritten(f)]
        self._host.group_cancelled(self, cause)
        for step in steps:
            self._host.withdraw(step, error)
        self._maybe_finish()
        return True

    @property
    def future(self) -> GroupFuture:
        """The group's :class:`~.holds.GroupFuture`, created on first use (or when the group
        resolves). Any thread."""
        future = self._future
        if future is None:
            with self._lock:
                future = self._future
                if future is None:
                    future = GroupFuture()
                    future.owner = self._host
                    future.of = self.owner
                    self.bind(future)
        return future

    @property
    def cancelled(self) -> str | None:
        """The cause label if the group was cancelled, else None."""
        return self._cancelled

    @property
    def steps(self) -> list[CallFuture]:
        """The steps' futures, in the order they were submitted (a copy)."""
        return list(self.step_futures())

    # ------------------------------------------------------------------ internals

    def _append(self, future: CallFuture) -> None:
        """Under the lock, before ``future`` can resolve: it is the last step, tagged with
        this group. The first step on the owner lends its equal :class:`ObjectRef` to
        ``owner`` (one ref less per group; ``_OWNER_SHARED``)."""
        steps = self._steps
        if isinstance(steps, tuple):  # none, or several
            self._steps = (*steps, future) if steps else future
        else:
            self._steps = (steps, future)
        self._unresolved += 1
        future.group = self
        if not self._flags & _OWNER_SHARED:
            call = future.call
            if call is not None and call.ref == self.owner:
                self.owner = call.ref  # equal: readers without the lock see either
                self._flags |= _OWNER_SHARED

    def _refusal(self, call: Call, held: bool) -> CallCancelled | None:
        """The step's actor, when its ``Submit`` arrives: None while the group is not
        cancelled, else the error it resolves with instead (``DependencyFailed`` if
        ``held``, else ``CallCancelled``): a ``Withdraw`` may overtake its ``Submit``."""
        cause = self._cause
        if cause is None:
            return None
        if held:
            return dependency_failed(call, cause)
        return CallCancelled(str(cause), ref=call.ref, call_type=call.call_type)

    def _drop_step(self, future: CallFuture) -> None:
        """Submitting thread: the step ``future``'s submit raised after registration
        (:meth:`drop_step` dropped it); it is no step."""
        future.group = None
        with self._lock:
            self._unresolved -= 1
        self._maybe_finish()

    def _step_done(self, future: CallFuture) -> None:
        """Resolving thread of a step (told by the step's future, whose ``group`` is this
        group, after its done-callbacks ran)."""
        exc = future.exception()
        with self._lock:
            self._unresolved -= 1
            if exc is not None and self._first is None:
                self._first = exc
        call = future.call
        if exc is not None and call is not None and call.ref.uid == self.owner.uid:
            if isinstance(exc, ObjectNotFound):
                self.cancel_for("owner_not_found")
            elif type(exc) is CallCancelled:
                self.cancel_for("owner_withdrawn")
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        """Resolve the group's future once it is sealed and every step resolved."""
        with self._lock:
            if self._flags & (_SEALED | _FINISHED) != _SEALED or self._unresolved:
                return
            self._flags |= _FINISHED
            steps = self.step_futures()
            first, cancelled = self._first, self._cancelled
        results: list[Outcome | BaseException] = []
        for step in steps:
            exc = step.exception()
            results.append(exc if exc is not None else step.result())
        if first is None and cancelled is not None:
            first = self._cause
        if first is None:
            self.future.set_result([r for r in results if isinstance(r, Outcome)])
        else:
            failed = sum(1 for r in results if not isinstance(r, Outcome))
            message = (
                f"{failed} of {len(results)} steps of the call group of {self.owner} did "
                f"not succeed: {first}"
            )
            error = GroupFailed(message, error=first, results=results, cancelled=cancelled)
            self.future.set_exception(self._failure(error))
        self._host.group_resolved(self)

    def _failure(self, error: GroupFailed) -> GroupFailed:
        """The error the group's future raises when a step did not succeed: ``error``."""
        return error


class OwnerIndex:
    """A dispatcher's open call groups by their owner's UID (each entry
    :data:`~.holds.OneOrMore`). Writes hold the lock; :meth:`owns` reads without it. Any
    thread."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._by_uid: dict[str, OneOrMore[CallGroup]] = {}
        self.count = 0  # groups in the index

    def owns(self, uid: str) -> bool:
        """Whether ``uid`` owns an open group (no lock: one dict lookup)."""
        return uid in self._by_uid

    def add(self, group: CallGroup) -> None:
        """Index ``group`` under its owner."""
        uid = group.owner.uid
        with self._lock:
            entry = self._by_uid.get(uid)
            self._by_uid[uid] = group if entry is None else (*as_tuple(entry), group)
            self.count += 1

    def remove(self, group: CallGroup) -> bool:
        """Drop ``group``; False if it was not indexed."""
        uid = group.owner.uid
        with self._lock:
            entry = self._by_uid.get(uid)
            if entry is None or group not in as_tuple(entry):
                return False
            rest = tuple(g for g in as_tuple(entry) if g is not group)
            if rest:
                self._by_uid[uid] = packed(rest)
            else:
                del self._by_uid[uid]
            self.count -= 1
        return True

    def of(self, uid: str) -> tuple[CallGroup, ...]:
        """The open groups ``uid`` owns."""
        with self._lock:
            entry = self._by_uid.get(uid)
        return () if entry is None else as_tuple(entry)

    def all(self) -> list[CallGroup]:
        """Every open group."""
        with self._lock:
            return [g for entry in self._by_uid.values() for g in as_tuple(entry)]
