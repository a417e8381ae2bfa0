"""``DispatcherLike``: what :class:`~kdispatch.Dispatcher` (in this process) and
:class:`~kdispatch.ProcessDispatcher` (its executor in a child process) both offer, so a
scheduler or controller can be written once against either. Both subclass it and inherit
what is the same in both (:meth:`DispatcherLike.preempt`)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any, Protocol, Self, Unpack, runtime_checkable

from .calls import Call
from .errors import DispatcherClosed, Outcome
from .groups import CallGroup
from .messages import CallFuture
from .objects import Obj
from .pod_calls import PodPreemption, PreemptionOptions

__all__ = ["DispatcherLike"]


@runtime_checkable
class DispatcherLike(Protocol):
    """The dispatcher's public surface. Every method may be called from any thread; the ones
    that only hand a message on (``submit``, ``preempt``, ``cancel``, ``on_*``) never block
    on the apiserver. See :class:`~kdispatch.Dispatcher` for each method's full contract
    (:meth:`preempt`'s is here: both dispatchers inherit it)."""

    def start(self) -> Self:
        """Start accepting calls; raises if it was started before."""
        ...

    def stop(self, drain: bool = True, timeout: float = 30.0) -> bool:
        """Stop intake, drain until ``timeout``, resolve the rest with ``DispatcherClosed``;
        True if every call finished in time."""
        ...

    def submit(self, call: Call, *, after: Iterable[object] = ()) -> CallFuture:
        """Hand ``call`` to its object's actor; the future resolves exactly once. ``after``:
        futures that must succeed first (:class:`~kdispatch.ProcessDispatcher` refuses it
        with :class:`~kdispatch.GroupsNotSupported`)."""
        ...

    def asubmit(self, call: Call, *, after: Iterable[object] = ()) -> asyncio.Future[Outcome]:
        """:meth:`submit` for asyncio code, awaited on the running loop."""
        ...

    def group(self, owner: object, *, kind: str | None = None) -> CallGroup:
        """Steps on any objects that die with ``owner`` (:class:`~kdispatch.ProcessDispatcher`
        refuses it with :class:`~kdispatch.GroupsNotSupported`)."""
        ...

    def preempt(
        self, pod: object, *, after: Iterable[object] = (), **options: Unpack[PreemptionOptions]
    ) -> CallFuture:
        """Any thread. Preempt a victim (a dict, a ``Mapping`` or an official-client ``V1Pod``):
        cancels its pending calls, then (optionally) sets the ``DisruptionTarget`` condition and
        deletes it with a UID precondition; with ``after``, not before those succeeded (see
        :meth:`submit`; :class:`~kdispatch.ProcessDispatcher` refuses it). Call groups owned by
        the victim are cancelled. ``options``: ``reason``, ``message``, ``preemptor``,
        ``grace_period_seconds``, ``add_condition`` (:class:`~kdispatch.PreemptionOptions`),
        with the defaults of :meth:`~kdispatch.PodPreemption.for_pod`. One :meth:`submit` of a
        :class:`~kdispatch.PodPreemption`, so it raises what ``submit`` raises."""
        # for_pod takes models and any Mapping (as_object)
        return self.submit(PodPreemption.for_pod(pod, **options), after=after)

    def cancel(self, uid: str, call_type: str | None = None) -> None:
        """Withdraw the object's pending call(s); they resolve ``CallCancelled``."""
        ...

    def revoke(self, error: DispatcherClosed) -> None:
        """Stop intake at once and resolve every call not on the wire with ``error``."""
        ...

    @property
    def revoked(self) -> DispatcherClosed | None:
        """The error :meth:`revoke` was called with, or None."""
        ...

    def view(self, uid: str, timeout: float = 5.0) -> Obj | None:
        """The object with pending mutations applied (read-your-writes), or None."""
        ...

    def aview(self, uid: str, timeout: float | None = 5.0) -> Coroutine[Any, Any, Obj | None]:
        """:meth:`view` for asyncio code."""
        ...

    def on_add(self, obj: object, kind: str | None = None) -> None:
        """Informer add: the object's actor learns its newest state."""
        ...

    def on_update(self, obj: object, kind: str | None = None) -> None:
        """Informer update."""
        ...

    def on_delete(self, obj: object, kind: str | None = None) -> None:
        """Informer delete: pending calls resolve ``CallCancelled``; the UID is tombstoned."""
        ...

    def freeze_gc(self) -> None:
        """Take every object alive now out of the cyclic collector's scans."""
        ...

    @property
    def outstanding(self) -> int:
        """Futures not yet resolved."""
        ...

    @property
    def tokens_taken(self) -> int:
        """Rate-limiter tokens used so far."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters for reports (requests sent, outcomes, retries per call type)."""
        ...
