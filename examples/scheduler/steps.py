"""Steps of one operation, ordered: a kdispatch call group, or :class:`ChainedSteps` where the
API layer has none.

The binding cycle writes a pod's ResourceClaims and then binds it; a preemption nominates the
preemptor and then deletes its victims. The scheduler builds both on :class:`Steps`:

* with the dispatcher in this process (mode ``async``), a :class:`~kdispatch.CallGroup` owned
  by the pod: a held call is admitted at once and sent only after its prerequisites succeeded
  (each retry included), and the pod's deletion withdraws every step not yet on the wire;
* with ``--pre-kep``, ``--all-blocking`` and ``--dispatcher-process`` (the dispatcher in a
  child process refuses groups), :class:`ChainedSteps`: a call with prerequisites is submitted
  from the done-callback of the last of them to resolve, if all succeeded. No thread waits for
  it; pre-KEP kube-scheduler ordered its binding cycle the same way, in the binding goroutine,
  and did not cancel it when the pod went away (the binding then meets a 404).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from functools import partial
from types import TracebackType
from typing import Protocol, Self

from kdispatch import Call, CallCancelled, DependencyFailed, Obj, ObjectRef, Outcome

CallFuture = Future[Outcome]


class Steps(Protocol):
    """What the scheduler asks of a call group. Any thread."""

    def submit(self, call: Call, *, after: Iterable[CallFuture] = ()) -> CallFuture:
        """Send ``call`` once every future in ``after`` succeeded; if one failed, the result
        raises :class:`~kdispatch.DependencyFailed` (``cause``: that failure) and nothing is
        sent."""
        ...

    def preempt(
        self, victim: Obj, *, preemptor: str, after: Iterable[CallFuture] = ()
    ) -> CallFuture:
        """Preempt ``victim`` for ``preemptor`` (``ns/name``), held on ``after`` likewise."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class Sender(Protocol):
    """The part of the scheduler's API layer :class:`ChainedSteps` sends through."""

    def submit(self, call: Call) -> CallFuture: ...

    def preempt(self, pod: Obj, *, preemptor: str) -> CallFuture: ...


class ChainedSteps:
    """:class:`Steps` over an API layer without call groups. A call without prerequisites is
    submitted at once; one with prerequisites gets a future of its own, resolved from the
    future the API layer returns once the call was submitted, which happens on the thread that
    resolved its last prerequisite (never waiting: the API layer's ``submit`` there hands the
    call on, or, with ``--all-blocking``, everything has resolved inline already).
    :meth:`cancel` (and an exception in the ``with`` block) drops the held calls not yet
    submitted: their futures raise :class:`~kdispatch.DependencyFailed`."""

    def __init__(self, api: Sender) -> None:
        self._api = api
        self._lock = threading.Lock()
        self._cancelled: CallCancelled | None = None

    def submit(self, call: Call, *, after: Iterable[CallFuture] = ()) -> CallFuture:
        """Any thread."""
        return self._held(list(after), partial(self._api.submit, call), call.call_type, call.ref)

    def preempt(
        self, victim: Obj, *, preemptor: str, after: Iterable[CallFuture] = ()
    ) -> CallFuture:
        """Any thread."""
        send = partial(self._api.preempt, victim, preemptor=preemptor)
        return self._held(list(after), send, "pod_preemption", ObjectRef.of(victim))

    def cancel(self) -> None:
        """Any thread. Held calls not yet submitted are never submitted."""
        with self._lock:
            if self._cancelled is None:
                self._cancelled = CallCancelled("steps cancelled")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        """Cancel the held calls if the block raised."""
        if exc_type is not None:
            self.cancel()

    def _held(
        self,
        after: list[CallFuture],
        send: Callable[[], CallFuture],
        call_type: str,
        ref: ObjectRef,
    ) -> CallFuture:
        if not after:
            return send()
        held: CallFuture = Future()
        held.set_running_or_notify_cancel()
        left = [len(after)]
        lock = threading.Lock()

        def one_done(_f: CallFuture) -> None:
            """Resolving thread of a prerequisite."""
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                self._release(after, send, held, call_type, ref)

        for prerequisite in after:
            prerequisite.add_done_callback(one_done)
        return held

    def _release(
        self,
        after: list[CallFuture],
        send: Callable[[], CallFuture],
        held: CallFuture,
        call_type: str,
        ref: ObjectRef,
    ) -> None:
        """Resolving thread of the last prerequisite: submit the call, or fail it."""
        with self._lock:
            failure: BaseException | None = self._cancelled
        for prerequisite in after:
            if failure is not None:
                break
            failure = prerequisite.exception()
        if failure is not None:
            held.set_exception(
                DependencyFailed(
                    f"{call_type} not sent: a prerequisite failed: {failure}",
                    ref=ref,
                    call_type=call_type,
                    cause=failure,
                )
            )
            return
        try:
            inner = send()
        except Exception as err:  # DispatcherClosed: the run is stopping
            held.set_exception(err)
            return
        inner.add_done_callback(partial(_relay, held))


def _relay(held: CallFuture, inner: CallFuture) -> None:
    """Resolving thread of ``inner``: resolve ``held`` the same way."""
    error = inner.exception()
    if error is not None:
        held.set_exception(error)
    else:
        held.set_result(inner.result())


__all__ = ["CallFuture", "ChainedSteps", "Sender", "Steps"]
