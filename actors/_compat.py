"""Everything kdispatch relies on from pykka and CPython beyond their public API, in one place.

Every private name of pykka, ``concurrent.futures`` or ``threading`` that kdispatch uses is
imported or subclassed here and nowhere else, and ``tests/test_compat.py`` pins the exact
behaviour each use relies on, so an upgrade that changes it fails that test loudly.

pykka (tested with 4.x)
-----------------------
* ``Envelope(message, reply_to=None)`` (``pykka._envelope``): what ``ActorRef.ask`` puts in
  ``actor.actor_inbox`` (``reply_to`` is ``actor_class._create_future()``), with ``.message``
  and ``.reply_to``; ``ActorRef.tell`` puts ``Envelope(message)``. :func:`ask_into` builds one
  for a reply future of the caller's own.
* ``ThreadingFuture`` (``pykka._threading``): the future of a pooled actor's asks.
* ``ActorStop`` (``pykka.messages._ActorStop``): what ``ActorRef.stop`` asks;
  ``Actor._handle_receive`` answers it by calling ``Actor._stop()``.
* :data:`ACTOR_HOOKS`: the private methods of ``pykka.Actor`` that
  :class:`~kdispatch.actors.runtime.PooledActor` overrides or calls, and the fields pykka's
  ``ActorRef`` reads from an actor (``actor_urn``, ``actor_inbox``, ``actor_stopped``, and
  ``_actor_ref`` behind ``Actor.actor_ref``).

CPython
-------
* :class:`LazyFuture` re-implements the private state of ``concurrent.futures.Future``
  (``_condition``, ``_state``, ``_result``, ``_exception``, ``_waiters``,
  ``_done_callbacks``, the ``PENDING``/``FINISHED`` states), which ``Future``'s own methods,
  ``concurrent.futures.wait`` and ``as_completed`` read.
* :class:`LazyEvent` re-implements the private state of ``threading.Event`` (``_flag``,
  ``_cond``, ``_at_fork_reinit``).

Operations atomic under the interpreter lock
--------------------------------------------
Some shared state is read and written without a lock; that code is correct because CPython's
global interpreter lock lets no other thread run in the middle of each of these operations,
and it relies on nothing more:

1. one ``dict`` lookup, store, ``setdefault``, ``pop`` or ``get`` whose key is a ``str`` or
   an ``int`` (their hashing and comparison run no Python code, so the interpreter cannot
   switch threads inside the operation); ``list(d.values())`` of such a dict (one C loop
   that allocates no object the collector tracks, so no collection, finaliser or thread
   switch can run inside it);
2. ``collections.deque`` ``append``, ``popleft`` and ``pop``;
3. ``next()`` on an ``itertools.count``;
4. one attribute load or store.

A read-modify-write (``x += 1``, ``d[k] = d.get(k, 0) + 1``) is not atomic: it appears
without a lock only where each thread writes its own key, or where a lost update is harmless,
as said where it is done. Modules that rely on this section say "atomic (see
:mod:`kdispatch.actors._compat`)". A build without the interpreter lock (free-threaded
CPython) is not supported; ``tests/test_compat.py`` checks that the lock is there.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, InvalidStateError
from concurrent.futures._base import FINISHED, PENDING
from typing import Any, Final, TypeVar

import pykka
from pykka._envelope import Envelope
from pykka._threading import ThreadingFuture
from pykka.messages import ProxyCall, ProxyGetAttr, ProxySetAttr
from pykka.messages import _ActorStop as ActorStop

from .lazy_condition import CREATE_LOCK, condition_of

__all__ = [
    "ACTOR_HOOKS",
    "PYKKA_MESSAGES",
    "ActorStop",
    "Envelope",
    "LazyEvent",
    "LazyFuture",
    "ThreadingFuture",
    "ask_into",
]

_T = TypeVar("_T")

ACTOR_HOOKS: Final = (
    "_create_actor_inbox",
    "_create_future",
    "_start_actor_loop",
    "_actor_loop_setup",
    "_handle_receive",
    "_stop",
    "_handle_failure",
)
"""The private methods of ``pykka.Actor`` that ``PooledActor`` overrides or calls."""

PYKKA_MESSAGES: Final = (ActorStop, ProxyCall, ProxyGetAttr, ProxySetAttr)
"""The messages ``pykka.Actor._handle_receive`` handles itself (a stop, the proxies')."""


def ask_into(ref: pykka.ActorRef[Any], message: Any, reply_to: pykka.Future[Any]) -> None:
    """``ref.ask(message)`` answered into the caller's own ``reply_to`` future (pykka's ``ask``
    always builds its own). Any thread; never blocks."""
    ref.actor_inbox.put(Envelope(message, reply_to=reply_to))


# --------------------------------------------------------------------------- threading.Event


def _plain_lock_condition() -> threading.Condition:
    return threading.Condition(threading.Lock())  # as threading.Event's own


class LazyEvent(threading.Event):
    """A ``threading.Event`` whose ``Condition`` (a lock, a deque and bound methods: ~1 KiB) is
    only created when somebody waits.

    Every pooled actor has one (``actor_stopped``, read by ``ActorRef.is_alive``) but almost
    nobody waits on it. Any thread.
    """

    _cond: threading.Condition | None

    def __init__(self) -> None:
        self._flag = False
        self._cond = None

    def __repr__(self) -> str:
        return f"<LazyEvent {'set' if self._flag else 'unset'}>"

    def _at_fork_reinit(self) -> None:
        if self._cond is not None:
            self._cond._at_fork_reinit()  # type: ignore[attr-defined]

    def _condition(self) -> threading.Condition:
        return condition_of(self, _plain_lock_condition)

    def is_set(self) -> bool:
        return self._flag

    isSet = is_set

    def set(self) -> None:
        # The flag is written before the condition is read; wait() creates the condition before
        # it reads the flag. So a waiter either sees the flag or is notified.
        self._flag = True
        cond = self._cond
        if cond is not None:
            with cond:
                cond.notify_all()

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        cond = self._condition()
        with cond:
            if not self._flag:
                cond.wait(timeout)
            return self._flag


# --------------------------------------------------------------------------- concurrent.futures


_new_lock = threading.Lock  # a sleeper's lock (tests wrap it to see a sleeper block)


class LazyFuture(Future[_T]):
    """A ``concurrent.futures.Future`` that is never cancelled and whose ``threading.Condition``
    (a lock, a deque and six bound methods: about 1.3 KiB) is created only when somebody adds a
    callback or waits through ``concurrent.futures.wait`` or ``as_completed`` (which work
    unchanged: they go through ``_condition``); a future nobody watched never has one.
    ``result()`` and ``exception()`` on a pending future without a condition wait on a lock of
    their own instead (a *sleeper*, released when the future resolves): the standard wait
    would build the condition and run ``Condition.wait``'s Python code. Any thread.
    """

    # Locks of the threads waiting in result()/exception() without the condition, acquired
    # once by their waiter and released by the resolution. A class default: the instance
    # attribute exists only on a future somebody waited on.
    _sleepers: tuple[threading.Lock, ...] = ()

    def __init__(self) -> None:
        self._cond: threading.Condition | None = None
        self._state = PENDING
        self._result: _T | None = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []

    @property
    def _condition(self) -> threading.Condition:
        """The standard Future's condition, created on first use. Any thread."""
        return condition_of(self)

    @_condition.setter
    def _condition(self, cond: threading.Condition) -> None:
        self._cond = cond

    def __repr__(self) -> str:
        if self._state != FINISHED:
            return f"<{type(self).__name__} at {id(self):#x} state=pending>"
        if self._exception is not None:
            what = f"raised {type(self._exception).__name__}"
        else:
            what = f"returned {self._result!r}"
        return f"<{type(self).__name__} at {id(self):#x} state=finished {what}>"

    def cancel(self) -> bool:
        """Any thread. Never cancels."""
        return False

    def cancelled(self) -> bool:
        """Any thread. Always False."""
        return False

    def running(self) -> bool:
        """Any thread. Always False (the standard executor state is not used)."""
        return False

    def done(self) -> bool:
        """Any thread. Whether the future resolved (one attribute read, no lock)."""
        return self._state == FINISHED

    def result(self, timeout: float | None = None) -> _T:
        """Any thread. As ``Future.result``; without the condition unless one exists."""
        if self._state == FINISHED or self._sleep(timeout):
            if self._exception is not None:
                raise self._exception
            return self._result  # type: ignore[return-value]
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Any thread. As ``Future.exception``; without the condition unless one exists."""
        if self._state == FINISHED or self._sleep(timeout):
            return self._exception
        return super().exception(timeout)

    def _sleep(self, timeout: float | None) -> bool:
        """Waiting thread: wait for the resolution on a sleeper lock. True once resolved;
        False, at once, if a condition exists (the standard wait takes over). Raises
        ``TimeoutError`` after ``timeout`` seconds, as ``Future.result`` does."""
        sleeper = _new_lock()
        sleeper.acquire()
        with CREATE_LOCK:  # the resolution reads the sleepers after FINISHED, under it
            if self._state == FINISHED:
                return True
            if self._cond is not None:
                return False
            self._sleepers += (sleeper,)
        if sleeper.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return True
        with CREATE_LOCK:
            if self._state == FINISHED:  # resolved as the wait ended
                return True
            self._sleepers = tuple(s for s in self._sleepers if s is not sleeper)
        raise TimeoutError()

    def set_result(self, result: _T) -> None:
        """Once, by the one thread that resolves the future."""
        if not self._finish_unwatched(result, None):
            super().set_result(result)
        if self._sleepers:
            self._wake_sleepers()

    def set_exception(self, exception: BaseException | None) -> None:
        """Once, by the one thread that resolves the future."""
        if not self._finish_unwatched(None, exception):
            super().set_exception(exception)
        if self._sleepers:
            self._wake_sleepers()

    def _wake_sleepers(self) -> None:
        """Resolving thread, once ``FINISHED``: release every sleeper (none can join now; a
        sleeper registered before a condition was created is released here too)."""
        with CREATE_LOCK:
            sleepers, self._sleepers = self._sleepers, ()
        for sleeper in sleepers:
            sleeper.release()

    def _finish_unwatched(self, result: _T | None, exception: BaseException | None) -> bool:
        """Resolve without a condition if nobody created one (True), else leave it to the
        standard path (False). The condition is created under ``CREATE_LOCK``, which this
        holds while it checks and resolves: a waiter, a callback or
        ``concurrent.futures.wait`` either created the condition first (standard path) or
        creates it after and then reads ``FINISHED`` under it."""
        if self._cond is not None:
            return False
        with CREATE_LOCK:
            if self._cond is not None:
                return False
            if self._state == FINISHED:
                raise InvalidStateError(f"{type(self).__name__} already resolved")
            self._result, self._exception = result, exception
            self._state = FINISHED
        # No callback to run: adding one (add_done_callback) creates the condition first.
        return True
