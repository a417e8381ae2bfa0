"""The scheduler's API layer: one interface, two implementations.

:class:`SchedulerApi` is everything the scheduler asks of the apiserver. :class:`DispatchedApi`
goes through a kdispatch :class:`~kdispatch.actors.dispatcher.Dispatcher` (returns at once; merged,
rate-limited, retried by the object actors and the executor), or through a
:class:`~kdispatch.adapters.process.ProcessDispatcher` running that dispatcher in a child process
(``--dispatcher-process``). :class:`~examples.scheduler.prekep.
PreKepApi` (``--pre-kep``) is kube-scheduler before KEP-5229: status patches and preemptions block
the scheduling thread, bindings run on binding threads. :class:`~examples.scheduler.direct.
DirectApi` (``--all-blocking``) performs every call on the calling thread before returning an
already resolved future. The scheduler code is the same in every mode.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Protocol

from kdispatch import Call, Dispatcher, Obj, Outcome, ProcessDispatcher

CallFuture = Future[Outcome]


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


class DispatchedApi:
    """:class:`SchedulerApi` over a started :class:`Dispatcher` (mode ``async``) or
    :class:`ProcessDispatcher` (mode ``async-process``)."""

    def __init__(self, dispatcher: Dispatcher | ProcessDispatcher) -> None:
        self.dispatcher = dispatcher
        self.mode = "async-process" if isinstance(dispatcher, ProcessDispatcher) else "async"

    def submit(self, call: Call) -> CallFuture:
        """Any thread; returns in microseconds."""
        return self.dispatcher.submit(call)

    def preempt(self, pod: Obj, *, preemptor: str) -> CallFuture:
        """Any thread; returns in microseconds."""
        return self.dispatcher.preempt(pod, preemptor=preemptor)

    def view(self, uid: str) -> Obj | None:
        """Scheduling thread (one actor round trip)."""
        return self.dispatcher.view(uid)

    def on_add(self, obj: Obj) -> None:
        """Informer thread."""
        self.dispatcher.on_add(obj)

    def on_update(self, obj: Obj) -> None:
        """Informer thread."""
        self.dispatcher.on_update(obj)

    def on_delete(self, obj: Obj) -> None:
        """Informer thread."""
        self.dispatcher.on_delete(obj)

    def stats(self) -> dict[str, Any]:
        """Any thread."""
        raw = self.dispatcher.stats()
        metrics = getattr(self.dispatcher, "metrics", None)
        dropped = (
            metrics.value("kdispatch_events_dropped_total", reason="throttled") if metrics else 0
        )
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

    def close(self, *, drain: bool, timeout: float) -> bool:
        """Caller thread."""
        return self.dispatcher.stop(drain=drain, timeout=timeout)
