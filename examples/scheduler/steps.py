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

A gang (a PodGroup placed as a whole) binds its members through :class:`GangSteps`:

* with the dispatcher in this process, :class:`DispatcherGang` over a kdispatch gang
  (``Dispatcher.group(owner=podgroup, gang=n)``): the member bindings are held until all ``n``
  were submitted, then released together; a failure before that withdraws them all and sends
  nothing;
* elsewhere (``--pre-kep``, ``--all-blocking``, ``--dispatcher-process``), :class:`PerPodGang`:
  each member binding is sent as it is submitted, one by one, as kube-scheduler binds a gang's
  members (a refused member does not hold back the others).

Either way ``future`` resolves once every member resolved (the list of outcomes, or a
:class:`~kdispatch.GroupFailed`), and :meth:`GangSteps.then` submits a call (the PodGroup's
``PodGroupInitiallyScheduled=True``) once every member was bound, without anyone waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from functools import partial
from types import TracebackType
from typing import Any, Final, Protocol, Self

from kdispatch import (
    Call,
    CallCancelled,
    CallGroup,
    DependencyFailed,
    DispatcherLike,
    GangPartiallyBound,
    GroupFailed,
    Obj,
    ObjectRef,
    Outcome,
)

CallFuture = Future[Outcome]
MEMBER: Final = "pod_binding"
"""The call type of a gang's members."""


class Steps(Protocol):
    """What the scheduler asks of a call group. Any thread."""

    def submit(self, call: Call, *, after: Iterable[Future[Any]] = ()) -> CallFuture:
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

    def submit(self, call: Call, *, after: Iterable[Future[Any]] = ()) -> CallFuture:
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
        after: list[Future[Any]],
        send: Callable[[], CallFuture],
        call_type: str,
        ref: ObjectRef,
    ) -> CallFuture:
        if not after:
            return send()
        held: CallFuture = Future()
        held.set_running_or_notify_cancel()

        def release() -> None:
            """Resolving thread of the last prerequisite: submit the call, or fail it."""
            failure = self._failure(after)
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

        _when_all_done(after, release)
        return held

    def _failure(self, after: list[Future[Any]]) -> BaseException | None:
        """Why a held call must not be sent (None: send it): the cancellation, or the first
        prerequisite that failed. Resolving thread of the last prerequisite."""
        with self._lock:
            if self._cancelled is not None:
                return self._cancelled
        for prerequisite in after:
            failure = prerequisite.exception()
            if failure is not None:
                return failure
        return None


def _when_all_done(futures: Sequence[Future[Any]], then: Callable[[], None]) -> None:
    """Call ``then()`` once every one of ``futures`` (at least one) resolved, on the thread
    that resolved the last of them (at once if all already did). Never waits."""
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_f: Future[Any]) -> None:
        """Resolving thread of one of ``futures``."""
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            then()

    for future in futures:
        future.add_done_callback(one_done)


def _relay(held: CallFuture, inner: CallFuture) -> None:
    """Resolving thread of ``inner``: resolve ``held`` the same way."""
    error = inner.exception()
    if error is not None:
        held.set_exception(error)
    else:
        held.set_result(inner.result())


class GangSteps(Steps, Protocol):
    """What the scheduler asks of a gang's steps (see the module docstring). Any thread."""

    @property
    def future(self) -> Future[Any]:
        """Resolves once every step resolved: the outcomes, or :class:`~kdispatch.GroupFailed`
        (a :class:`~kdispatch.GangPartiallyBound` when some members landed and some not)."""
        ...

    def then(self, call: Call) -> CallFuture:
        """Submit ``call`` once every step succeeded (never if one failed: its future raises
        :class:`~kdispatch.DependencyFailed`). Returns at once."""
        ...


class DispatcherGang:
    """:class:`GangSteps` over a kdispatch gang (a :class:`~kdispatch.CallGroup` built with
    ``gang=``) of ``dispatcher``."""

    def __init__(self, group: CallGroup, dispatcher: DispatcherLike) -> None:
        self._group = group
        self._dispatcher = dispatcher

    def submit(self, call: Call, *, after: Iterable[Future[Any]] = ()) -> CallFuture:
        """Any thread. A pod binding is a member: held until the gang is complete."""
        return self._group.submit(call, after=after)

    def preempt(
        self, victim: Obj, *, preemptor: str, after: Iterable[CallFuture] = ()
    ) -> CallFuture:
        """Any thread."""
        return self._group.preempt(victim, preemptor=preemptor, after=after)

    @property
    def future(self) -> Future[Any]:
        """Any thread. The gang's future."""
        return self._group.future

    def then(self, call: Call) -> CallFuture:
        """Any thread. ``call`` held by the dispatcher on the gang's future."""
        return self._dispatcher.submit(call, after=[self._group.future])

    def __enter__(self) -> Self:
        self._group.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        """Seal the gang: the members submitted so far are released (or, if the block
        raised, withdrawn)."""
        self._group.__exit__(*exc_info)


class PerPodGang(ChainedSteps):
    """:class:`GangSteps` over an API layer without gangs: :class:`ChainedSteps`, each member
    binding sent as it is submitted; :attr:`future` resolves once the gang is sealed (the end
    of the ``with`` block) and every member resolved."""

    def __init__(self, api: Sender) -> None:
        super().__init__(api)
        self._members_lock = threading.Lock()
        self._members: list[tuple[ObjectRef, CallFuture]] = []
        self._future: Future[list[Outcome]] = Future()
        self._future.set_running_or_notify_cancel()

    def submit(self, call: Call, *, after: Iterable[Future[Any]] = ()) -> CallFuture:
        """Any thread."""
        future = super().submit(call, after=after)
        if call.call_type == MEMBER:
            with self._members_lock:
                self._members.append((call.ref, future))
        return future

    @property
    def future(self) -> Future[Any]:
        """Any thread."""
        return self._future

    def then(self, call: Call) -> CallFuture:
        """Any thread. Submitted from the done-callback of :attr:`future`, if it succeeded."""
        return super().submit(call, after=[self._future])

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        """Seal: :attr:`future` resolves once the members submitted so far resolved."""
        super().__exit__(exc_type, *rest)
        with self._members_lock:
            members = list(self._members)
        if not members:
            self._future.set_result([])
            return
        _when_all_done([future for _, future in members], partial(self._resolve, members))

    def _resolve(self, members: list[tuple[ObjectRef, CallFuture]]) -> None:
        """Resolving thread of the last member."""
        results: list[Outcome | BaseException] = []
        for _, future in members:
            error = future.exception()
            results.append(future.result() if error is None else error)
        bound: list[ObjectRef] = []
        failed: list[ObjectRef] = []
        for (ref, _), result in zip(members, results, strict=True):
            (failed if isinstance(result, BaseException) else bound).append(ref)
        if not failed:
            self._future.set_result([r for r in results if isinstance(r, Outcome)])
            return
        first = next(r for r in results if isinstance(r, BaseException))
        message = f"{len(failed)} of {len(members)} members not bound: {first}"
        error = (
            GangPartiallyBound(message, error=first, results=results, bound=bound, failed=failed)
            if bound
            else GroupFailed(message, error=first, results=results)
        )
        self._future.set_exception(error)


__all__ = [
    "CallFuture",
    "ChainedSteps",
    "DispatcherGang",
    "GangSteps",
    "PerPodGang",
    "Sender",
    "Steps",
]
