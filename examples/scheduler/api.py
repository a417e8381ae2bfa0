"""The scheduler's API layer: one interface, two implementations.

:class:`SchedulerApi` is everything the scheduler asks of the apiserver. :class:`DispatchedApi`
goes through a kdispatch :class:`~kdispatch.Dispatcher` (returns at once; merged,
rate-limited, retried by the object actors and the executor), or through a
:class:`~kdispatch.ProcessDispatcher` running that dispatcher in a child process
(``--dispatcher-process``). :class:`~examples.scheduler.prekep.
PreKepApi` (``--pre-kep``) is kube-scheduler before KEP-5229: status patches and preemptions block
the scheduling thread, bindings run on binding threads. :class:`~examples.scheduler.direct.
DirectApi` (``--all-blocking``) performs every call on the calling thread before returning an
already resolved future. The scheduler code is the same in every mode.

Operations of several calls in order (a binding cycle, a preemption) go through
:meth:`SchedulerApi.group`: a kdispatch call group where the dispatcher runs in this process,
else :class:`~examples.scheduler.steps.ChainedSteps`. A gang's bindings go through
:meth:`SchedulerApi.gang`: a kdispatch gang where the dispatcher runs in this process, else
:class:`~examples.scheduler.steps.PerPodGang` (one binding per pod, as kube-scheduler binds).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from examples.scheduler.steps import (
    CallFuture,
    ChainedSteps,
    DispatcherGang,
    GangSteps,
    PerPodGang,
    Steps,
)
from kdispatch import (
    Call,
    DispatcherLike,
    GroupsNotSupported,
    Obj,
    ProcessDispatcher,
)


class SchedulerApi(Protocol):
    """What the scheduler needs. Every method may be called from any scheduler thread."""

    mode: str
    """``"async"``, ``"async-process"``, ``"pre-kep"`` or ``"all-blocking"``."""

    def submit(self, call: Call) -> CallFuture:
        """Send ``call``; the future resolves with an :class:`Outcome` or raises a call error."""
        ...

    def preempt(self, pod: Obj, *, preemptor: str) -> CallFuture:
        """Preempt (mark and delete) ``pod`` to make room for ``preemptor`` (``ns/name``)."""
        ...

    def group(self, owner: Obj) -> Steps:
        """Steps of one operation on behalf of ``owner`` (a pod), sent in the order their
        ``after=`` asks; use it as a context manager."""
        ...

    def gang(self, owner: Obj, members: int) -> GangSteps:
        """Steps binding the ``members`` pods of the PodGroup ``owner`` as one gang (see
        :mod:`examples.scheduler.steps`); use it as a context manager."""
        ...

    def view(self, uid: str) -> Obj | None:
        """The object with this API layer's pending mutations applied, or None if unknown."""
        ...

    def on_add(self, obj: Obj) -> None:
        """Informer add (Pods and ResourceClaims). Only tells."""
        ...

    def on_update(self, obj: Obj) -> None:
        """Informer update. Only tells."""
        ...

    def on_delete(self, obj: Obj) -> None:
        """Informer delete. Only tells."""
        ...

    def stats(self) -> dict[str, Any]:
        """``sent`` (attempts per call type), ``outcomes`` (``type:outcome`` counts),
        ``retries`` (total), ``tokens_taken``, ``events_dropped`` (Events dropped unsent)."""
        ...

    def outstanding(self) -> int:
        """Futures not yet resolved."""
        ...

    def close(self, *, drain: bool, timeout: float) -> bool:
        """Stop; with ``drain`` let pending calls finish until ``timeout``. True if all did."""
        ...


@runtime_checkable
class Backlogged(Protocol):
    """An API layer a scheduling loop can pace itself on (:class:`DispatchedApi`)."""

    def wait_backlog(
        self, below: int, timeout: float | None, *, call_type: str | None = None
    ) -> bool:
        """Calling thread (blocks it). Wait until fewer than ``below`` calls are unresolved
        in ``call_type``'s lane and the lanes above it (None: every lane but the Events');
        False after ``timeout`` seconds (None: no limit)."""
        ...


class ForwardedObjects:
    """:meth:`SchedulerApi.view` and the informer handlers, handed on to ``_objects``: the
    dispatcher, or the API layer a pre-KEP scheduler sends through."""

    _objects: DispatcherLike | SchedulerApi

    def view(self, uid: str) -> Obj | None:
        """Scheduling thread (the dispatcher: one actor round trip)."""
        return self._objects.view(uid)

    def on_add(self, obj: Obj) -> None:
        """Informer thread."""
        self._objects.on_add(obj)

    def on_update(self, obj: Obj) -> None:
        """Informer thread."""
        self._objects.on_update(obj)

    def on_delete(self, obj: Obj) -> None:
        """Informer thread."""
        self._objects.on_delete(obj)


class DispatchedApi(ForwardedObjects):
    """:class:`SchedulerApi` over a started :class:`~kdispatch.DispatcherLike`: a
    :class:`~kdispatch.Dispatcher` (mode ``async``) or a :class:`~kdispatch.ProcessDispatcher`
    (mode ``async-process``)."""

    def __init__(self, dispatcher: DispatcherLike) -> None:
        self.dispatcher = self._objects = dispatcher
        self.mode = "async-process" if isinstance(dispatcher, ProcessDispatcher) else "async"
        self._groups = True  # until the dispatcher refuses one (GroupsNotSupported)

    def submit(self, call: Call) -> CallFuture:
        """Any thread; returns in microseconds."""
        return self.dispatcher.submit(call)

    def preempt(self, pod: Obj, *, preemptor: str) -> CallFuture:
        """Any thread; returns in microseconds."""
        return self.dispatcher.preempt(pod, preemptor=preemptor)

    def group(self, owner: Obj) -> Steps:
        """Any thread; returns at once. The dispatcher's call group owned by ``owner`` (the
        owner's deletion withdraws the steps not yet sent), or :class:`ChainedSteps` if the
        dispatcher has no groups (:class:`~kdispatch.ProcessDispatcher`)."""
        if self._groups:
            try:
                return self.dispatcher.group(owner)
            except GroupsNotSupported:
                self._groups = False
        return ChainedSteps(self)

    def gang(self, owner: Obj, members: int) -> GangSteps:
        """Any thread; returns at once. A kdispatch gang owned by the PodGroup ``owner``
        (``Dispatcher.group(owner=..., gang=members)``): the member bindings are sent together
        once all were submitted, or not at all. :class:`PerPodGang` with a dispatcher that has
        no groups (:class:`~kdispatch.ProcessDispatcher`)."""
        if self._groups:
            try:
                return DispatcherGang(self.dispatcher.group(owner, gang=members), self.dispatcher)
            except GroupsNotSupported:
                self._groups = False
        return PerPodGang(self)

    def stats(self) -> dict[str, Any]:
        """Any thread."""
        raw = self.dispatcher.stats()
        dropped = sum(raw.get("events", {}).get("dropped", {}).values())
        return {
            "sent": dict(raw["sent"]),
            "outcomes": dict(raw["outcomes"]),
            "retries": sum(raw["retries"].values()),
            "tokens_taken": int(raw.get("tokens_taken", raw["sent_total"])),
            "events_dropped": int(dropped),
        }

    def outstanding(self) -> int:
        """Any thread."""
        return self.dispatcher.outstanding

    def wait_backlog(
        self, below: int, timeout: float | None, *, call_type: str | None = None
    ) -> bool:
        """Scheduling thread: the dispatcher's :meth:`~kdispatch.DispatcherLike.wait_backlog`,
        woken as its calls resolve."""
        return self.dispatcher.wait_backlog(below, timeout, call_type=call_type)

    def close(self, *, drain: bool, timeout: float) -> bool:
        """Caller thread."""
        return self.dispatcher.stop(drain=drain, timeout=timeout)
