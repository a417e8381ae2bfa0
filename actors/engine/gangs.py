"""Gangs: a call group whose member bindings are sent all together or not at all
(docs/gangs.md). Threads: as :class:`~.groups.CallGroup`. Once ``min_count`` members were
submitted (or the gang is sealed), each member's actor is asked to confirm, in order with what
it was told before; the gate opens on the turn of the last to answer, if no member failed.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import InvalidStateError
from contextlib import suppress
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
    submitted or it is sealed, and every member's actor admitted its binding, then released
    together. A member's failure before that withdraws them all
    (:class:`~kdispatch.GroupFailed`), one after it leaves the others bound
    (:class:`~kdispatch.GangPartiallyBound`); its other steps follow the call group's rules.
    Build it with ``Dispatcher.group(owner=podgroup, gang=min_count)`` (docs/gangs.md has an
    example)."""

    __slots__ = (
        "_asked",
        "_due",
        "_entering",
        "_gate",
        "_members",
        "_open",
        "_shut",
        "_unasked",
        "min_count",
    )

    def __init__(self, host: GroupHost, owner: ObjectRef, lock: Lock, min_count: int) -> None:
        super().__init__(host, owner, lock)
        self.min_count = min_count
        self._members = 0  # member bindings submitted (told to their actors)
        self._entering = 0  # member bindings being submitted (perhaps not told yet)
        self._unasked: list[CallFuture] = []  # members told, not yet asked to confirm
        self._asked = 0  # confirmations asked and not answered yet
        self._due = False  # min_count members submitted, or sealed: release once confirmed
        self._open = False  # the gate opened: members are sent
        self._shut = False  # the gate never opens: a member failed first, or revoked
        gate = GroupFuture()
        gate.owner = host
        gate.of = owner
        self._gate = gate

    def __repr__(self) -> str:
        if self._open:
            state = "released"
        elif self._due:
            state = f"{self._members} held, releasing"
        else:
            state = f"{self._members}/{self.min_count} held"
        return f"<Gang of {self.owner} {state}>"

    @property
    def released(self) -> bool:
        """Whether the gate opened (the members were let go). Any thread."""
        return self._open

    def submit(self, call: Call, *, after: Iterable[object] = ()) -> CallFuture:
        """Any thread. Add a step (as :meth:`CallGroup.submit`, which raises the same errors); a
        pod binding is a member, held until the gate opens."""
        if getattr(call, "call_type", None) != _MEMBER:
            return super().submit(call, after=after)  # a non-call: its InvalidCallError
        with self._lock:
            gated = not self._open
            if gated:  # the gate waits until it is told (or refused)
                self._entering += 1
        if not gated:
            return super().submit(call, after=after)
        try:
            gated_after = (*(check_after(after) if after else ()), self._gate)  # as _admit reads
            future = super().submit(call, after=gated_after)
        except BaseException:
            with self._lock:
                self._entering -= 1
            self._advance()
            raise
        with self._lock:
            self._entering -= 1
            self._members += 1
            if self._members >= self.min_count:
                self._due = True
            self._unasked.append(future)
        self._advance()
        return future

    def _seal(self, *, closing: bool, revoking: bool = False, draining: bool = True) -> None:
        """Seal, and release the members submitted so far. When the dispatcher stops
        (``closing``), a gang not yet due for release is cancelled instead: all or nothing;
        without ``draining``, so is one due but not released yet (nothing of it would be
        drained). When it is revoked, a gang not released never is: its members' actors
        resolve them with the revocation's error, as every held call."""
        with self._lock:
            held = not self._open and self._cancelled is None
            if held and revoking:
                self._shut = True
            stopped = held and closing and not revoking and not (self._due and draining)
            if not closing:
                self._due = True
        if stopped:
            self.cancel_for("stopped")
        else:
            self._advance()
        super()._seal(closing=closing)

    def _revoked(self, error: BaseException) -> None:
        """``revoke``, after every actor was told: a gate that never opened fails, so a member
        told to its actor after the revocation (a racing submit) is not held forever."""
        if self._shut:
            self._fail_gate(error)

    def cancel_for(self, cause: str) -> bool:
        """Any thread. As :meth:`CallGroup.cancel_for`; before the gate opened, the members
        resolve ``DependencyFailed`` and nothing of them is sent."""
        if not super().cancel_for(cause):
            return False
        with self._lock:  # a gate not yet open fails (its waiters were withdrawn)
            self._shut = not self._open
            error = self._cause if self._shut else None
        if error is not None:
            self._fail_gate(error)
        return True

    def _fail_gate(self, error: BaseException) -> None:
        """The gate never opens: the members still held on it resolve ``DependencyFailed``
        (the first failure wins)."""
        with suppress(InvalidStateError):
            self._gate.set_exception(error)

    def _advance(self) -> None:
        """Any thread. Once the gang is due: ask each member's actor to confirm it handled
        what it was told before (the member's admission or refusal, the pod's deletion), and
        when every confirmation came, with no member failed meanwhile (that cancelled the
        gang), open the gate."""
        with self._lock:
            if self._open or self._shut or self._cancelled is not None or not self._due:
                return
            # a member resolved as a success (skipped, merged away) needs no answer; one that
            # failed does: its actor answers after the failure withdrew the gang
            ask = [f for f in self._unasked if not (f.done() and f.exception() is None)]
            self._unasked = []
            self._asked += len(ask)
            release = not self._asked and not self._entering
            if release:
                self._open = True
        for future in ask:
            self._host.confirm_member(future, self._confirmed)
        if release:
            self._release()

    def _confirmed(self) -> None:
        """A member's actor's turn (:meth:`_advance` asked it): one confirmation came."""
        with self._lock:
            self._asked -= 1
        self._advance()

    def _release(self) -> None:
        """Once, right after :meth:`_advance` opened the gang: the held members are released
        together, their tokens booked as one block in the bindings' lane (docs/gangs.md)."""
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
        every member (but after a revocation, which resolves each with its error)."""
        call = future.call
        if call is not None and call.call_type == _MEMBER:
            failed = future.exception() is not None
            with self._lock:  # either the gate opened first, or it never opens
                released = self._open
                withdraw = failed and not released and not self._shut
                if withdraw:
                    self._shut = True
            if released:
                self._host.leave_block(call.ref.uid)  # resolved before its grant: token back
            elif withdraw:
                self.cancel_for("member_failed")
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
