"""Gangs: a call group whose member bindings are sent all together or not at all
(docs/gangs.md). Threads: as :class:`~.groups.CallGroup`; the gate opens on the thread that
submits the ``min_count``-th member or seals the gang.
"""

from __future__ import annotations

from collections.abc import Iterable
from threading import Lock
from typing import Final

from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.errors import GangPartiallyBound, GroupFailed, InvalidInputError
from kdispatch.actors.model.objects import ObjectRef
from kdispatch.actors.model.pod_calls import PodBinding

from .groups import CallGroup, GroupHost
from .holds import GroupFuture, check_after
from .messages import CallFuture

__all__ = ["Gang", "check_min_count"]

_MEMBER: Final = PodBinding.call_type


def check_min_count(gang: object) -> int:
    """Caller thread: ``gang`` as a member count, or :class:`InvalidInputError`."""
    if isinstance(gang, bool) or not isinstance(gang, int) or gang < 1:
        raise InvalidInputError(f"gang must be a member count (an int >= 1), got {gang!r}")
    return gang


class Gang(CallGroup):
    """A call group whose members (its pod bindings) are held until ``min_count`` were
    submitted or it is sealed, then released together. A failure before that withdraws them
    all (:class:`~kdispatch.GroupFailed`), one after it leaves the others bound
    (:class:`~kdispatch.GangPartiallyBound`). Build it with
    ``Dispatcher.group(owner=podgroup, gang=min_count)`` (docs/gangs.md has an example)."""

    __slots__ = ("_gate", "_members", "_open", "min_count")

    def __init__(self, host: GroupHost, owner: ObjectRef, lock: Lock, min_count: int) -> None:
        super().__init__(host, owner, lock)
        self.min_count = min_count
        self._members = 0  # member bindings submitted
        self._open = False  # the gate opened: members are sent
        gate = GroupFuture()
        gate.owner = host
        gate.of = owner
        self._gate = gate

    def __repr__(self) -> str:
        state = "released" if self._open else f"{self._members}/{self.min_count} held"
        return f"<Gang of {self.owner} {state}>"

    @property
    def released(self) -> bool:
        """Whether the gate opened (the members were let go). Any thread."""
        return self._open

    def submit(self, call: Call, *, after: Iterable[object] = ()) -> CallFuture:
        """Any thread. Add a step (as :meth:`CallGroup.submit`, which raises the same errors); a
        pod binding is a member, held until the gate opens."""
        if getattr(call, "call_type", None) != _MEMBER or self._open:
            return super().submit(call, after=after)  # a non-call: its InvalidCallError
        gated = (*(check_after(after) if after else ()), self._gate)  # as _admit reads after
        future = super().submit(call, after=gated)
        with self._lock:
            self._members += 1
            ready = self._members >= self.min_count
        if ready:
            self._release()
        return future

    def _seal(self, *, closing: bool) -> None:
        """Seal, and open the gate for the members submitted so far. When the dispatcher
        stops (``closing``), a gang whose gate is still shut is cancelled instead: all or
        nothing."""
        if closing and not self._open:
            self.cancel_for("stopped")
        else:
            self._release()
        super()._seal(closing=closing)

    def cancel_for(self, cause: str) -> bool:
        """Any thread. As :meth:`CallGroup.cancel_for`; before the gate opened, the members
        resolve ``DependencyFailed`` and nothing of them is sent."""
        if not super().cancel_for(cause):
            return False
        with self._lock:  # a gate not yet open fails (its waiters were withdrawn)
            error = None if self._open or self._gate.done() else self._cause
        if error is not None:
            self._gate.set_exception(error)
        return True

    def _release(self) -> None:
        """Open the gate once: the held members are released together, their tokens booked
        as one block in the bindings' lane (docs/gangs.md)."""
        with self._lock:
            if self._open or self._cancelled is not None:
                return
            self._open = True
            members = {
                step.call.ref.uid: step
                for step in self.step_futures()
                if step.call is not None and step.call.call_type == _MEMBER and not step.done()
            }
        self._host.reserve_block(list(members.values()))
        for uid, step in members.items():
            if step.done():  # resolved (withdrawn) meanwhile: its _step_done found no block
                self._host.leave_block(uid)
        self._gate.set_result([])

    def _step_done(self, future: CallFuture) -> None:
        """Resolving thread of a step: a member that fails before the gate opened withdraws
        every member."""
        call = future.call
        if call is not None and call.call_type == _MEMBER:
            if not self._open:
                if future.exception() is not None:
                    self.cancel_for("member_failed")
            else:
                self._host.leave_block(call.ref.uid)  # resolved before its grant: token back
        super()._step_done(future)

    def _failure(self, error: GroupFailed) -> GroupFailed:
        """The gang's error: :class:`GangPartiallyBound` if some members landed and others
        did not, else the group's ``error``."""
        bound: list[ObjectRef] = []
        failed: list[ObjectRef] = []
        for step, result in zip(self.step_futures(), error.results, strict=True):
            call = step.call
            if call is None or call.call_type != _MEMBER:
                continue
            (failed if isinstance(result, BaseException) else bound).append(call.ref)
        if bound and failed:
            return GangPartiallyBound(
                f"gang of {self.owner}: {len(bound)} of {len(bound) + len(failed)} members "
                f"bound, {len(failed)} failed: {error.error}",
                error=error.error,
                results=error.results,
                cancelled=error.cancelled,
                bound=bound,
                failed=failed,
            )
        return error
