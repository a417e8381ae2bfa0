"""Pooled actors: thousands of small actors, a few shared worker threads.

An :class:`Actor` is a slotted object with an inbox (an object and a lock, not an OS thread).
:meth:`Actor.tell` queues a message and, when the actor was idle, puts it on its
:class:`ActorPool`'s ready queue; a worker then runs the actor's *turn*: the queued messages,
one at a time, in order, at most ``batch``, then back to the end of the ready queue if more
wait. One actor's messages are never handled by two threads at once.

Rules for subclasses: :meth:`Actor.receive` runs on a pool worker and **must never block**
(replies travel as messages or futures). An actor leaves by closing its inbox
(:meth:`Actor.stop` on its turn, or :meth:`Actor.close_if_empty`, atomic with every tell); a
tell to a closed actor returns False and queues nothing, and messages still queued at the stop
go to :meth:`Actor.dropped`. An exception from :meth:`Actor.receive` calls
:meth:`Actor.crashed` and stops that actor only. The worker running a turn pops messages
without the lock (``deque.popleft`` is atomic, and only it pops) and takes it to go idle.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from queue import SimpleQueue
from typing import Any, Final

from loguru import logger

from kdispatch.actors.model.errors import InvalidConfigError, KdispatchError

__all__ = ["Actor", "ActorPool", "PoolStateError"]


class PoolStateError(KdispatchError, RuntimeError):
    """The pool is in the wrong state: started twice, restarted after a stop, or stopped from
    one of its own worker threads."""


_IDLE: Final = 0  # nothing queued, not on the ready queue
_SCHEDULED: Final = 1  # on the ready queue, or its turn is running
_CLOSED: Final = 2  # stopped: tells are refused
_NOTHING: Final = object()  # no first message for a turn


class Actor:
    """Base of pooled actors (see the module docstring). Subclasses define ``__slots__`` and
    :meth:`receive`; they may override :meth:`dropped` and :meth:`crashed`."""

    __slots__ = ("_items", "_lock", "_ready", "_state")

    def __init__(self, pool: ActorPool) -> None:
        """Bind the actor to ``pool``; nothing runs until the first tell. Any thread."""
        self._ready = pool._ready
        self._items: deque[Any] | None = None  # created on the first tell, freed when drained
        self._lock = threading.Lock()
        self._state = _IDLE

    # ------------------------------------------------------------------ any thread

    def tell(self, message: object) -> bool:
        """Queue ``message``; False, with nothing queued, once the actor has stopped. Any
        thread; holds the actor's lock for a few stores."""
        lock = self._lock
        lock.acquire()
        state = self._state
        if state == _CLOSED:
            lock.release()
            return False
        items = self._items
        if items is None:
            self._items = deque((message,))
        else:
            items.append(message)
        if state == _SCHEDULED:
            lock.release()
            return True
        self._state = _SCHEDULED
        lock.release()
        self._ready.put(self)
        return True

    @property
    def stopped(self) -> bool:
        """Whether the actor has stopped (its inbox is closed). Any thread."""
        return self._state == _CLOSED

    def close_if_empty(self) -> bool:
        """Stop the actor if nothing is queued (True), atomically with every tell: a message
        told before is handled (False), one told after is refused. Its own turn, or any thread
        once no turn can run (the pool stopped)."""
        with self._lock:
            if self._items or self._state == _CLOSED:
                return False
            self._state = _CLOSED
            self._items = None
        return True

    def abandon(self) -> list[Any]:
        """Stop now, without handling anything more, and return the queued messages. Any
        thread once no turn of this actor can run (its pool is stopped)."""
        with self._lock:
            items, self._items = self._items, None
            self._state = _CLOSED
        return list(items) if items else []

    # ------------------------------------------------------------------ the actor's turn

    def receive(self, message: Any) -> None:
        """Handle one message. The actor's turn, on a pool worker; must never block."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop after the message being handled: the inbox closes now, and whatever is still
        queued goes to :meth:`dropped`. The actor's own turn."""
        with self._lock:
            self._state = _CLOSED

    def dropped(self, message: Any) -> None:
        """A message still queued when the actor stopped. Default: log it. Its last turn."""
        logger.debug("{} dropped {!r}", self, message)

    def crashed(self, error: BaseException) -> None:
        """:meth:`receive` raised ``error``; the actor stops after this. Default: log it."""
        logger.opt(exception=error).error("actor {} crashed", self)

    def run_or_tell(self, message: object, batch: int = 16) -> bool:
        """Handle ``message`` now, as a turn of this actor on the calling thread (up to
        ``batch`` messages), if no turn of it is running or queued; else :meth:`tell` it.
        False, with nothing done, once the actor has stopped. Any thread that may run the
        actor's code (an executor worker with a result saves the pool a wake-up)."""
        lock = self._lock
        lock.acquire()
        state = self._state
        if state != _IDLE or self._items:
            lock.release()
            return self.tell(message)
        self._state = _SCHEDULED  # this thread runs the turn: no other can start one
        lock.release()
        self._turn(batch, message)
        return True

    def _turn(self, batch: int, first: object = _NOTHING) -> None:
        """Handle ``first`` (if given) and the queued messages, up to ``batch`` in all, then go
        idle, requeue, or finish stopping (a crash or a stop ends the turn once the queue was
        drained). The thread running this turn (a pool worker, or :meth:`run_or_tell`'s
        caller): the only one running this actor now."""
        message = first
        items = self._items
        for _ in range(batch):
            if message is _NOTHING:
                if not items:
                    lock = self._lock
                    lock.acquire()
                    items = self._items
                    if not items:
                        if self._state == _SCHEDULED:
                            self._items = None
                            self._state = _IDLE
                        lock.release()
                        return
                    lock.release()
                message = items.popleft()  # only this thread pops: atomic against a tell's append
            try:
                self.receive(message)
            except BaseException as exc:  # this actor only: the thread goes on
                self._crash(exc)
                return
            if self._state == _CLOSED:
                self._drain()
                return
            message = _NOTHING
        self._ready.put(self)  # batch used up: back of the queue (still scheduled)

    def _crash(self, error: BaseException) -> None:
        """The turn's thread, after :meth:`receive` raised: report, stop, drain."""
        try:
            self.crashed(error)
        except Exception:
            logger.opt(exception=True).error("crash handler of {} failed", self)
        self.stop()
        self._drain()

    def _drain(self) -> None:
        """The last turn's thread, once closed: hand the queued messages to :meth:`dropped`."""
        with self._lock:
            items, self._items = self._items, None
        for message in items or ():
            try:
                self.dropped(message)
            except Exception:
                logger.opt(exception=True).error("dropped() of {} failed", self)


class ActorPool:
    """A fixed set of worker threads running actor turns, from ``start()`` to ``stop()`` (not
    restartable). Actors are not tracked by the pool: their owner (the registry) keeps them."""

    def __init__(self, workers: int = 1, batch: int = 16, name: str = "kdispatch-pool") -> None:
        """Validate; starts nothing. Any thread."""
        for what, value in (("workers", workers), ("batch", batch)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidConfigError(f"{what} must be an int >= 1, got {value!r}")
        if not isinstance(name, str) or not name:
            raise InvalidConfigError(f"name must be a non-empty str, got {name!r}")
        self.workers: Final = workers
        self.batch: Final = batch
        self.name: Final = name
        self._ready: SimpleQueue[Actor | None] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._state = "new"
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ActorPool {self.name} {self._state} workers={self.workers}>"

    def start(self) -> None:
        """Start the worker threads (daemons named ``{name}-{i}``). Any thread. Raises
        :class:`PoolStateError` if already started or stopped."""
        with self._lock:
            if self._state != "new":
                raise PoolStateError(f"{self.name} is {self._state}: cannot start it")
            self._state = "running"
            self._threads = [
                threading.Thread(target=self._work, name=f"{self.name}-{i}", daemon=True)
                for i in range(self.workers)
            ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float | None = None) -> list[str]:
        """No further turn starts; wait up to ``timeout`` seconds (None: no limit) for the
        workers to exit; the names of those still running (a turn stuck in a request).
        Idempotent. Any thread but the pool's own workers (:class:`PoolStateError`)."""
        if threading.current_thread() in self._threads:
            raise PoolStateError(f"{self.name}.stop() called from its own worker thread")
        with self._lock:
            first = self._state == "running"
            self._state = "stopped"
        if first:
            for _ in self._threads:
                self._ready.put(None)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return [t.name for t in self._threads if t.is_alive()]

    @property
    def running(self) -> bool:
        """Whether turns may still start. Any thread."""
        return self._state == "running"

    def _work(self) -> None:
        """A worker: run turns until the pool stops."""
        ready = self._ready
        batch = self.batch
        while True:
            actor = ready.get()
            if actor is None or self._state != "running":
                return
            try:
                actor._turn(batch)
            except BaseException:  # a worker never dies of one actor
                logger.opt(exception=True).error("{}: a turn of {} failed", self.name, actor)
