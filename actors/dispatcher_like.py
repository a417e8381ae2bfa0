"""``DispatcherLike``: what :class:`~kdispatch.Dispatcher` (in this process) and
:class:`~kdispatch.ProcessDispatcher` (its executor in a child process) both offer, so a
scheduler or controller can be written once against either. Both subclass it and inherit
what is the same in both (:meth:`DispatcherLike.preempt`), and share :class:`BacklogWaiters`,
the one home of :meth:`DispatcherLike.wait_backlog`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol, Self, Unpack, runtime_checkable

from .aio import check_timeout
from .calls import Call
from .errors import DispatcherClosed, InvalidInputError, Outcome
from .groups import CallGroup
from .messages import CallFuture
from .objects import Obj
from .pod_calls import PodPreemption, PreemptionOptions, preemption_options

__all__ = ["BacklogWaiters", "DispatcherLike"]


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
    def backlog(self) -> int:
        """Any thread; cheap. Calls submitted and not yet resolved, best-effort calls
        (Events) left out: what a caller that paces itself on :meth:`wait_backlog` counts.
        Events are left out because the executor sends them only when nothing else waits
        (and drops them when they cannot go in time): a caller waiting for them would wait
        for its own lull."""
        ...

    def wait_backlog(self, below: int, timeout: float | None = None) -> bool:
        """Calling thread (blocks it; never an actor's or the reader's thread, nor an event
        loop). Back-pressure a caller opts into, as ``submit`` never blocks: wait until
        :attr:`backlog` is below ``below``; True then (at once if it is already), False when
        ``timeout`` seconds (None: no limit) passed first. Woken by resolutions, never by
        polling: a resolution signals only while a thread waits here, so ``submit`` and the
        resolving threads pay one attribute read otherwise. Raises
        :class:`~kdispatch.actors.errors.InvalidInputError` for a ``below`` that is not an
        int >= 1 or a ``timeout`` that is not a positive number or None."""
        ...

    @property
    def tokens_taken(self) -> int:
        """Rate-limiter tokens used so far."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters for reports (requests sent, outcomes, retries per call type)."""
        ...


class BacklogWaiters:
    """The threads in a dispatcher's :meth:`~DispatcherLike.wait_backlog`, and the count of
    its unresolved best-effort calls. ``unresolved`` is the dispatcher's count of futures not
    yet resolved; :attr:`backlog` is that less the best-effort calls among them.

    The dispatcher calls :meth:`track_best_effort` for each best-effort future it hands out
    and, after each resolution (or batch of them), :meth:`wake` when :attr:`wake_below` is
    not 0: that read is all a resolution costs while nobody waits. Any thread."""

    __slots__ = ("_below", "_best_effort", "_cond", "_unresolved", "wake_below")

    def __init__(self, unresolved: Callable[[], int]) -> None:
        self._unresolved = unresolved
        self._best_effort: deque[None] = deque()  # one entry per unresolved best-effort call
        self._cond = threading.Condition(threading.Lock())
        self._below: list[int] = []  # the bound of each waiting thread (under the lock)
        self.wake_below = 0
        """The highest bound a thread waits for (0: none waits); read without the lock."""

    @property
    def backlog(self) -> int:
        """Any thread. Unresolved calls, best-effort ones left out."""
        return max(0, self._unresolved() - len(self._best_effort))

    def track_best_effort(self, future: Any) -> None:
        """Submitting thread: ``future`` (a ``concurrent.futures.Future`` that will resolve
        exactly once) belongs to a best-effort call; it leaves :attr:`backlog` out."""
        self._best_effort.append(None)  # append and pop are atomic: no lock
        future.add_done_callback(self._best_effort_done)

    def _best_effort_done(self, _future: Any) -> None:
        """The resolving thread, before the dispatcher counts the resolution."""
        self._best_effort.pop()

    def wait(self, below: int, timeout: float | None) -> bool:
        """Calling thread: :meth:`DispatcherLike.wait_backlog`."""
        if isinstance(below, bool) or not isinstance(below, int) or below < 1:
            raise InvalidInputError(f"below must be an int >= 1, got {below!r}")
        seconds = check_timeout(timeout)
        if self.backlog < below:
            return True
        deadline = None if seconds is None else time.monotonic() + seconds
        with self._cond:
            # Registered before the check below: a resolution after this reads wake_below and
            # takes the lock to notify, which it gets only once this thread waits.
            self._below.append(below)
            self.wake_below = max(self._below)
            try:
                while self.backlog >= below:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left)
                return True
            finally:
                self._below.remove(below)
                self.wake_below = max(self._below, default=0)

    def wake(self) -> None:
        """A resolving thread, when :attr:`wake_below` is not 0: wake the waiting threads if
        the backlog is below the highest bound (each checks its own)."""
        if self.backlog < self.wake_below:
            with self._cond:
                self._cond.notify_all()
