"""``DispatcherLike``: what :class:`~kdispatch.Dispatcher` and
:class:`~kdispatch.ProcessDispatcher` both offer. Both subclass :class:`DispatcherBase` and
inherit what is the same in both (``asubmit``, ``aview``, ``preempt``, ``on_add``/``on_update``,
the backlog, the context manager), and share :class:`Backlog`, the one home of
:meth:`DispatcherLike.wait_backlog`'s counting and waiting."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import deque
from collections.abc import Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar, Unpack, runtime_checkable

from kdispatch.actors.engine.aio import running_loop, wrap_call_future
from kdispatch.actors.engine.groups import CallGroup
from kdispatch.actors.engine.messages import CallFuture
from kdispatch.actors.model.calls import BEST_EFFORT, Call, CallTypeRegistry
from kdispatch.actors.model.config import check_timeout
from kdispatch.actors.model.errors import DispatcherClosed, InvalidInputError, Outcome
from kdispatch.actors.model.objects import Obj, check_uid
from kdispatch.actors.model.pod_calls import PodPreemption, PreemptionOptions, preemption_options

_E = TypeVar("_E", bound=BaseException)

__all__ = ["Backlog", "DispatcherBase", "DispatcherLike", "fresh", "lane_level"]


@runtime_checkable
class DispatcherLike(Protocol):
    """The dispatcher's public surface. Every method may be called from any thread; the ones
    that only hand a message on (``submit``, ``preempt``, ``cancel``, ``on_*``) never block
    on the apiserver. See :class:`~kdispatch.Dispatcher` for each method's full contract
    (:meth:`asubmit`'s, :meth:`preempt`'s and :attr:`backlog`'s are here: both dispatchers
    inherit them)."""

    def start(self) -> Self:
        """Start accepting calls; raises if it was started before."""
        ...

    def stop(self, drain: bool = True, timeout: float | None = 30.0) -> bool:
        """Stop intake, drain until ``timeout`` (None: no deadline), resolve the rest with
        ``DispatcherClosed``; True if every call finished in time. A ``timeout`` that is not a
        number >= 0 or None raises :class:`~kdispatch.InvalidInputError` and stops nothing."""
        ...

    def submit(self, call: Call, *, after: Iterable[object] = ()) -> CallFuture:
        """Hand ``call`` to its object's actor; the future resolves exactly once. ``after``:
        futures that must succeed first (:class:`~kdispatch.ProcessDispatcher` refuses it
        with :class:`~kdispatch.GroupsNotSupported`)."""
        ...

    def asubmit(self, call: Call, *, after: Iterable[object] = ()) -> asyncio.Future[Outcome]:
        """Event-loop thread; never blocks it. ``await dispatcher.asubmit(call)`` gives the
        call's :class:`Outcome` or raises what ``submit(call).result()`` would.

        The call is submitted when ``asubmit`` is called, and bad input raises here (outside a
        running loop: :class:`~kdispatch.NoEventLoopError`). The result is an
        ``asyncio.Future`` on the running loop (it may be given in ``after=``), settled by the
        thread that resolves the call. Cancelling it does not withdraw the call (:meth:`cancel`
        does)."""
        loop = running_loop("asubmit()")
        return wrap_call_future(self.submit(call, after=after), loop)

    def group(
        self, owner: object, *, kind: str | None = None, gang: int | None = None
    ) -> CallGroup:
        """Steps on any objects that die with ``owner``; with ``gang``, bindings sent all
        together or not at all (:class:`~kdispatch.ProcessDispatcher` refuses both with
        :class:`~kdispatch.GroupsNotSupported`)."""
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
        with the defaults of :meth:`~kdispatch.PodPreemption.for_pod` (another name raises
        :class:`~kdispatch.InvalidCallError` listing them). One :meth:`submit` of a
        :class:`~kdispatch.PodPreemption`, so it raises what ``submit`` raises."""
        # for_pod takes models and any Mapping (as_object)
        return self.submit(PodPreemption.for_pod(pod, **preemption_options(options)), after=after)

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

    def view(self, uid: str, timeout: float | None = 5.0) -> Obj | None:
        """The object with pending mutations applied (read-your-writes), or None;
        ``TimeoutError`` after ``timeout`` seconds (None: no limit)."""
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
    def backlog(self) -> int:
        """Any thread; cheap. Calls submitted and not yet resolved, best-effort calls
        (Events) left out: :meth:`backlog_at` with no call type."""
        return self.backlog_at()

    def backlog_at(self, call_type: str | None = None) -> int:
        """Any thread; cheap. Calls submitted and not yet resolved whose lane is at or above
        ``call_type``'s (``"pod_binding"`` counts bindings, preemptions and evictions, not
        status patches); None: as :attr:`backlog`. Held calls and group steps count in their
        lane. Raises :class:`~kdispatch.UnknownCallTypeError` for an unregistered type."""
        ...

    def wait_backlog(
        self, below: int, timeout: float | None = None, *, call_type: str | None = None
    ) -> bool:
        """Calling thread (blocks it; never an actor's or the reader's thread, nor an event
        loop). Back-pressure a caller opts into: wait until :meth:`backlog_at`
        ``(call_type)`` is below ``below``; True then (at once if it is already), False when
        ``timeout`` seconds (None: no limit) passed first. Pace on the lane you are about to
        submit to (docs: "Pacing the caller"). Woken by resolutions, never by polling.
        Raises :class:`~kdispatch.InvalidInputError` for a ``below`` that is not an int >= 1,
        a ``timeout`` that is not a positive finite number or None, or an unregistered call
        type."""
        ...

    @property
    def tokens_taken(self) -> int:
        """Rate-limiter tokens used so far."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters for reports (requests sent, outcomes, retries per call type)."""
        ...


def fresh(error: _E) -> _E:
    """Any thread: a copy of ``error`` to raise (a traceback of its own per caller), or
    ``error`` itself if it does not copy (a constructor that takes other arguments)."""
    try:
        return copy.copy(error)
    except Exception:
        return error


def lane_level(call_types: CallTypeRegistry, call_type: str | None) -> int:
    """The lowest relevance :meth:`DispatcherLike.backlog_at` counts for ``call_type``: its
    relevance, or 1 (every lane but :data:`~.calls.BEST_EFFORT`) for None. Any thread.
    Raises :class:`~.errors.UnknownCallTypeError` (an ``InvalidInputError``)."""
    if call_type is None:
        return BEST_EFFORT + 1
    if not isinstance(call_type, str):
        raise InvalidInputError(f"call_type must be a call type name or None, got {call_type!r}")
    return call_types.spec(call_type).relevance


class Backlog:
    """A dispatcher's unresolved calls, counted per lane (relevance), and the threads in its
    :meth:`~DispatcherLike.wait_backlog`. Any thread.

    Counting takes no lock: a lane is a ``deque`` with one entry per unresolved call
    (``append``/``pop`` are atomic). A future keeps its lane (``CallFuture.lane``, set before
    anything can resolve it); a resolution pops it, then calls :meth:`wake` only while
    :attr:`waiters` is not 0."""

    __slots__ = ("_cond", "_new_lane", "_waiting", "lanes", "waiters")

    def __init__(self) -> None:
        # relevance -> one entry per unresolved call; replaced whole (under _new_lane) when a
        # lane is added, so readers iterate a dict nobody changes
        self.lanes: dict[int, deque[None]] = {}
        self._new_lane = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        # (below, level) of each waiting thread: replaced whole under _cond, read without it
        self._waiting: tuple[tuple[int, int], ...] = ()
        self.waiters = 0
        """Threads waiting in :meth:`wait` (0: none); read without the lock."""

    def add(self, future: CallFuture, relevance: int) -> None:
        """Submitting thread: count ``future`` in lane ``relevance`` (created on first use),
        before anything can resolve it; whoever resolves it pops ``future.lane``."""
        lane = self.lanes.get(relevance)
        if lane is None:
            with self._new_lane:
                lane = self.lanes.get(relevance)
                if lane is None:
                    lane = deque()
                    self.lanes = {**self.lanes, relevance: lane}
        lane.append(None)
        future.lane = lane

    def count(self, level: int) -> int:
        """Any thread. Unresolved calls whose relevance is ``level`` or more."""
        return sum([len(lane) for relevance, lane in self.lanes.items() if relevance >= level])

    @property
    def outstanding(self) -> int:
        """Any thread. Every unresolved call, best-effort ones included."""
        return sum([len(lane) for lane in self.lanes.values()])

    def wait(self, below: int, timeout: float | None, level: int) -> bool:
        """Calling thread: :meth:`DispatcherLike.wait_backlog` on the lanes from ``level``
        up (see :func:`lane_level`)."""
        if isinstance(below, bool) or not isinstance(below, int) or below < 1:
            raise InvalidInputError(f"below must be an int >= 1, got {below!r}")
        seconds = check_timeout(timeout)
        if self.count(level) < below:
            return True
        deadline = None if seconds is None else time.monotonic() + seconds
        me = (below, level)
        with self._cond:
            # Registered before the check below: a resolution after this reads waiters and
            # takes the lock to notify, which it gets only once this thread waits.
            self._waiting = (*self._waiting, me)
            self.waiters = len(self._waiting)
            try:
                while self.count(level) >= below:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left)
                return True
            finally:
                waiting = list(self._waiting)
                waiting.remove(me)
                self._waiting = tuple(waiting)
                self.waiters = len(waiting)

    def wake(self) -> None:
        """A resolving thread, when :attr:`waiters` is not 0: wake the waiting threads if one
        of them may go on (each checks its own bound)."""
        for below, level in self._waiting:
            if self.count(level) < below:
                with self._cond:
                    self._cond.notify_all()
                return


class DispatcherBase(DispatcherLike):
    """What both dispatchers implement the same way, on their own ``_backlog`` (calls counted
    in the caller's process), ``call_types``, ``_started``, ``_closed`` and ``_revoked``."""

    call_types: CallTypeRegistry
    _backlog: Backlog
    _started: bool
    _closed: bool
    _revoked: DispatcherClosed | None
    _state_lock: threading.Condition

    def __enter__(self) -> Self:
        return self.start() if not self._started else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _mark_started(self) -> None:
        """Caller thread (``start``, under its state lock). Raises
        :class:`~kdispatch.InvalidInputError` if already started, or once stopped."""
        if self._closed:
            raise InvalidInputError(f"dispatcher stopped: create a new {type(self).__name__}")
        if self._started:
            raise InvalidInputError("dispatcher already started")
        self._started = True

    def _mark_revoked(self, error: DispatcherClosed) -> bool:
        """Any thread (``revoke``): record ``error``; False if it was revoked before. Raises
        :class:`~kdispatch.InvalidInputError` unless ``error`` is a :class:`DispatcherClosed`."""
        if not isinstance(error, DispatcherClosed):
            raise InvalidInputError("revoke needs a DispatcherClosed (e.g. LeadershipLost)")
        with self._state_lock:
            if self._revoked is not None:
                return False
            self._revoked = error
        return True

    def _closed_error(self) -> DispatcherClosed:
        """Any thread, once intake stopped: what a submit raises (a fresh exception, with its
        own traceback, per caller)."""
        if self._revoked is not None:
            return fresh(self._revoked)
        return DispatcherClosed(
            "dispatcher is stopped" if self._closed else "dispatcher not started"
        )

    if TYPE_CHECKING:

        async def _aview(self, uid: str, timeout: float | None) -> Obj | None: ...

        def _observe(self, obj: object, kind: str | None) -> None: ...

    def aview(self, uid: str, timeout: float | None = 5.0) -> Coroutine[Any, Any, Obj | None]:
        """``await dispatcher.aview(uid)``: :meth:`view` for asyncio code; the loop is never
        blocked and no thread waits. Bad input raises when ``aview`` is called; once awaited,
        :class:`TimeoutError` after ``timeout`` seconds (a later answer is dropped), None if the
        object is not tracked (:class:`~kdispatch.ProcessDispatcher`: :class:`DispatcherClosed`
        when its child is not running)."""
        check_uid(uid)
        return self._aview(uid, check_timeout(timeout))

    @property
    def outstanding(self) -> int:
        """Any thread; cheap. Futures not yet resolved (counted in the caller's process)."""
        return self._backlog.outstanding

    def on_add(self, obj: object, kind: str | None = None) -> None:
        """Informer thread (or the event loop); only hands the object on, never blocks. A
        tracked object's actor learns its newest state; untracked objects are ignored."""
        self._observe(obj, kind)

    def on_update(self, obj: object, kind: str | None = None) -> None:
        """Informer thread (or the event loop): as :meth:`on_add`."""
        self._observe(obj, kind)

    @property
    def revoked(self) -> DispatcherClosed | None:
        """The error :meth:`revoke` was called with, or None."""
        return self._revoked

    def backlog_at(self, call_type: str | None = None) -> int:
        """Any thread; cheap. :meth:`DispatcherLike.backlog_at`."""
        return self._backlog.count(lane_level(self.call_types, call_type))

    def wait_backlog(
        self, below: int, timeout: float | None = None, *, call_type: str | None = None
    ) -> bool:
        """Calling thread (never an actor's or a reader's):
        :meth:`DispatcherLike.wait_backlog`."""
        return self._backlog.wait(below, timeout, lane_level(self.call_types, call_type))
