"""A dispatcher's call groups: :class:`GroupHostMixin` (a base of
:class:`~.dispatcher.Dispatcher`) builds them, and its internal hooks (the groups', never a
program's) submit, refuse, withdraw and forget their steps. Any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Final, overload

from kdispatch.actors.engine.executor import Executor
from kdispatch.actors.engine.gangs import Gang, check_min_count
from kdispatch.actors.engine.groups import CallGroup, OwnerIndex
from kdispatch.actors.engine.holds import Dependencies, overwritten
from kdispatch.actors.engine.messages import CallFuture, Confirm, Withdraw, settle
from kdispatch.actors.engine.metrics import Metrics
from kdispatch.actors.engine.registry import Registry
from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.errors import CallCancelled, Outcome
from kdispatch.actors.model.objects import ObjectRef, check_uid

from .dispatcher_like import DispatcherBase

__all__ = ["GROUP_LOCK_STRIPES", "GroupHostMixin"]

GROUP_LOCK_STRIPES: Final = 64  # locks shared by the call groups of one dispatcher


class GroupHostMixin(DispatcherBase):
    """The call groups of a :class:`~.dispatcher.Dispatcher` (its fields, declared here)."""

    metrics: Metrics
    _deps: Dependencies
    _executor: Executor
    _group_locks: tuple[threading.Lock, ...]
    _owners: OwnerIndex
    _registry: Registry

    if TYPE_CHECKING:

        def _admit(
            self, call: Call, after: Iterable[object], group: CallGroup | None
        ) -> CallFuture: ...

        def _on_resolved(self, future: CallFuture) -> None: ...

    def _init_groups(self) -> None:
        """Constructor: the prerequisites of held calls, the call groups by owner UID, and the
        striped locks that guard the groups' fields."""
        self._deps = Dependencies(self, self._registry.tell, self.metrics)
        self._owners = OwnerIndex()
        self._group_locks = tuple(threading.Lock() for _ in range(GROUP_LOCK_STRIPES))

    def _resolve_now(
        self, future: CallFuture, call: Call, outcome: Outcome | CallCancelled
    ) -> None:
        """Submitting thread: resolve a call that never reached its actor."""
        label = outcome.value if isinstance(outcome, Outcome) else "cancelled"
        self.metrics.outcome(call.call_type, label)
        settle(future, outcome)
        self._on_resolved(future)

    @overload
    def group(self, owner: object, *, kind: str | None = None, gang: None = None) -> CallGroup: ...

    @overload
    def group(self, owner: object, *, kind: str | None = None, gang: int) -> Gang: ...

    @overload
    def group(
        self, owner: object, *, kind: str | None = None, gang: int | None = None
    ) -> CallGroup: ...

    def group(
        self, owner: object, *, kind: str | None = None, gang: int | None = None
    ) -> CallGroup:
        """Any thread. A :class:`~kdispatch.CallGroup` of steps that die with ``owner`` (a
        dict, a ``Mapping``, an official-client model, or an :class:`ObjectRef`): its deletion
        (:meth:`on_delete`, or a 404 on a step on it) or its preemption cancels the group.
        With ``gang=min_count``, a :class:`~kdispatch.Gang`. Raises :class:`DispatcherClosed`
        once ``stop`` or ``revoke`` was called, :class:`InvalidInputError` for a ``gang`` that
        is not an int >= 1."""
        ref = owner if isinstance(owner, ObjectRef) else ObjectRef.of(owner, kind)
        check_uid(ref.uid)
        min_count = None if gang is None else check_min_count(gang)
        if self._revoked is not None or self._closed or not self._started:
            raise self._closed_error()
        lock = self._group_locks[hash(ref.uid) % GROUP_LOCK_STRIPES]
        group = (
            CallGroup(self, ref, lock) if min_count is None else Gang(self, ref, lock, min_count)
        )
        self._owners.add(group)
        self.metrics.groups_open_delta(1)
        if self._revoked is not None or self._closed:  # stop/revoke sealed the groups meanwhile
            self.group_resolved(group)
            raise self._closed_error()
        if self._registry.is_tombstoned(ref.uid):  # deleted already
            group.cancel_for("owner_deleted")
        return group

    @property
    def open_groups(self) -> int:
        """Call groups created and not yet resolved. Any thread."""
        return self._owners.count

    @property
    def held_calls(self) -> int:
        """Calls held on prerequisites that have not all resolved. Any thread."""
        return self._deps.held

    def submit_step(self, call: Call, after: Iterable[object], group: CallGroup) -> CallFuture:
        """Caller thread (``CallGroup.submit``): :meth:`submit` as a step of ``group``."""
        return self._admit(call, after, group)

    def refuse_step(self, call: Call, after: Iterable[object], group: CallGroup) -> CallFuture:
        """Caller thread: a step of a cancelled group, resolved at once and never sent. Its
        ``call`` and ``after`` are checked as :meth:`submit` checks them."""
        self.call_types.check(call)
        if after:
            self._deps.prerequisites(after)
        future = CallFuture()
        future.owner = self
        future.call = call
        self._backlog.add(future, call.relevance)
        group.add_step(future)
        refused = group._refusal(call, held=False)
        assert refused is not None  # a group is never un-cancelled
        self._resolve_now(future, call, refused)
        return future

    def withdraw(self, future: CallFuture, cause: CallCancelled) -> None:
        """Any thread: withdraw one step, by its future (:meth:`.ObjectState.withdraw`). A
        held step fails its hold (it resolves ``DependencyFailed`` with ``cause``); any other
        is withdrawn exactly: pending, it resolves ``CallCancelled``; in flight, it is not
        sent again. A step resolved ``OVERWRITTEN`` is withdrawn from the newer call that
        carries its intent (which is sent anyway while it carries another intent)."""
        call = future.call
        if call is None:
            return
        if future.done():
            if not overwritten(future):
                return
        elif self._deps.fail(future, cause):
            return
        self._registry.tell(call.ref.uid, Withdraw(future, cause))

    def group_cancelled(self, group: CallGroup, cause: str) -> None:
        """Any thread: ``group`` was cancelled (metrics)."""
        self.metrics.group_cancelled(cause)

    def group_resolved(self, group: CallGroup) -> None:
        """Any thread: ``group``'s future resolved; forget it."""
        if self._owners.remove(group):
            self.metrics.groups_open_delta(-1)

    def confirm_member(self, future: CallFuture, answer: Callable[[], None]) -> None:
        """Any thread (a gang about to release): have the actor of ``future``'s object call
        ``answer()`` once it handled what it was told before (:class:`Confirm`); at once if
        the object has no actor (its calls have resolved)."""
        call = future.call
        if call is None or not self._registry.tell(call.ref.uid, Confirm(answer)):
            answer()

    def reserve_block(self, members: Collection[CallFuture]) -> None:
        """Any thread (a gang's release, before its gate opens): the tokens of the
        ``members`` held on nothing but the gate, as one block
        (:meth:`~kdispatch.actors.engine.executor.Executor.reserve_block`). A member still
        waiting for another prerequisite stays out: the block would wait for it, and it may
        wait for a token the block holds back. A member whose object's next call still
        holds another token once the gate released it (another caller's held call merged
        with it, or queued ahead of it) leaves the block on its actor's turn."""
        calls = [f.call for f in self._deps.held_on_one(members) if f.call is not None]
        if calls:
            self._executor.reserve_block([c.ref.uid for c in calls], calls[0].relevance)

    def leave_block(self, uid: str) -> None:
        """Any thread (a gang member resolved): it leaves its token block, if still in one."""
        self._executor.leave_block(uid)

    def _cancel_owned(self, uid: str, cause: str, spare: CallGroup | None = None) -> None:
        """Any thread: cancel the call groups ``uid`` owns (but ``spare``, whose own step
        preempts its owner)."""
        for group in self._owners.of(uid):
            if group is not spare:
                group.cancel_for(cause)

    def _seal_groups(self, *, revoking: bool = False, draining: bool = True) -> list[CallGroup]:
        """The thread in ``stop`` (``draining`` unless ``drain=False``) or ``revoke``: no group
        takes more steps; each resolves with its last step. The groups sealed."""
        groups = self._owners.all()
        for group in groups:
            group._seal(closing=True, revoking=revoking, draining=draining)
        return groups
