"""Pooled pykka actors: many actors, a few shared worker threads.

pykka's ``ThreadingActor`` gives every actor its own OS thread, which costs tens of KiB and a
context switch per message. :class:`PooledActor` is a real :class:`pykka.Actor` subclass whose
inbox is drained by the worker threads of an :class:`ActorPool` instead:

* the messages of one actor are handled one at a time and in order;
* different actors run concurrently, up to ``pool.workers`` at once;
* an actor handles at most ``pool.batch`` messages per turn, then goes to the back of the ready
  queue, so a flooded actor cannot starve the others;
* ``ActorRef.tell``/``ask``/``stop``, futures (pykka's ``ThreadingFuture``), proxies and the
  ``on_start``/``on_stop``/``on_failure`` hooks behave as in pykka. An exception raised while
  handling an ``ask`` goes to the caller and the actor keeps running; one raised while handling a
  ``tell`` calls ``on_failure`` and stops that actor only. A ``BaseException`` stops only the actor
  that raised it (pykka would stop every actor in its registry).

No worker ever blocks on an empty inbox: ``inbox.put()`` puts the actor on the pool's ready queue
when it was idle (a per-inbox state makes sure it is queued at most once).

Two rules differ from plain pykka and matter to callers:

* **Pooled actors are not in pykka's** ``ActorRegistry``. That registry is one global list with
  O(n) unregister; ``ActorRegistry.get_all()``/``stop_all()`` do not see pooled actors. Keep your
  own references (see :mod:`actors.registry`) and stop actors with ``ref.stop()`` or
  :meth:`ActorPool.stop`.
* **A pooled actor must never block** on a future, on ``ask(..., block=True)``, on a proxy result
  or on anything else that waits for another actor: it would hold a pool worker and can deadlock
  the whole pool. Replies travel as messages (``tell`` a reply to the asker's ref).

The private parts of pykka that :class:`PooledActor` overrides or calls are listed, and pinned
by a test, in :mod:`._compat`.

Messages still queued when an actor stops are answered as in pykka (asks resolve with
``ActorDeadError``, queued stop requests with success); each queued *tell* is passed to
:meth:`PooledActor.on_dropped`.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
import uuid
from collections import deque
from queue import Empty, SimpleQueue
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import pykka
from loguru import logger
from pykka import ActorDeadError, ActorRef

from ._compat import PYKKA_MESSAGES, ActorStop, Envelope, LazyEvent, ThreadingFuture
from .errors import InvalidConfigError, InvalidInputError, KdispatchError

__all__ = [
    "ActorPool",
    "PoolStateError",
    "PooledActor",
    "PooledActorRef",
    "live_pooled_actors",
]


_URN_PREFIX: Final = uuid.uuid4().urn[:-12]
_URN_SERIAL = itertools.count()


def _new_urn() -> str:
    """A URN in UUID form, unique in this process: one random UUID drawn at import, its last 48
    bits replaced by a serial number (faster than ``uuid.uuid4()``, whose ``os.urandom`` call
    drops the interpreter lock on every spawn). Any thread: ``next()`` on the count is atomic
    (see :mod:`._compat`)."""
    return f"{_URN_PREFIX}{next(_URN_SERIAL) & 0xFFFF_FFFF_FFFF:012x}"


class PoolStateError(KdispatchError, RuntimeError):
    """The pool is in the wrong state for the request: an actor started on a pool that is not
    running, a stopped pool restarted, or a pool stopped from one of its own worker threads."""


# --------------------------------------------------------------------------- process-wide count

# Per thread: actors started minus actors stopped on that thread. No lock (for speed): each
# thread writes only its own key, so its read-modify-write races with nobody, and the dict
# operations and the ``list(values())`` snapshot are atomic (see :mod:`._compat`). A thread that
# ends leaves its figure, and a thread that reuses its ident adds to it, so the sum stays exact.
_live_by_thread: dict[int, int] = {}


def _add_live(delta: int) -> None:
    """Count ``delta`` actors started (or stopped, negative) on this thread. Any thread."""
    me = threading.get_ident()
    _live_by_thread[me] = _live_by_thread.get(me, 0) + delta


def live_pooled_actors() -> int:
    """Number of pooled actors started (on any pool) and not yet stopped. Any thread."""
    return sum(list(_live_by_thread.values()))


# --------------------------------------------------------------------------- inbox

_IDLE: Final = 0  # empty and not on the ready queue
_SCHEDULED: Final = 1  # on the ready queue or being run by a worker
_CLOSED: Final = 2  # the actor has stopped; puts are answered/dropped at once


class _PooledInbox:
    """The inbox of one pooled actor: a deque created on first use and freed when drained, one
    lock, and a state that puts the actor on the pool's ready queue at most once.

    ``put`` runs on any thread; ``get``/``empty`` and the private methods only on the pool
    worker that currently runs the actor's turn (the "owning worker").
    """

    __slots__ = ("_actor", "_items", "_lock", "_ready", "_state")

    def __init__(self, actor: PooledActor, ready: SimpleQueue[PooledActor | None]) -> None:
        self._actor: PooledActor | None = actor
        self._ready = ready
        self._items: deque[Any] | None = None  # Envelopes and bare tell messages
        self._lock = threading.Lock()
        self._state: int = _IDLE

    def put(self, envelope: Envelope[Any], /) -> None:
        """pykka's inbox API: queue an envelope (asks, stops); one put after the actor closed
        is answered at once (an ask fails with ``ActorDeadError``). Any thread, never
        blocks."""
        if not self._push(envelope):
            _reject_late(envelope)

    def _push(self, item: Any) -> bool:
        """Queue an envelope, or a bare tell message (never itself an ``Envelope``: see
        ``PooledActorRef.tell``); schedule the actor if it was idle. False (nothing queued)
        once the inbox is closed. Any thread, never blocks."""
        # Hot path: explicit acquire/release costs a third of a ``with`` block on CPython 3.11.
        lock = self._lock
        lock.acquire()
        try:
            state = self._state
            if state == _CLOSED:
                return False
            items = self._items
            if items is None:  # idle, or scheduled for on_start only
                self._items = deque((item,))
            else:
                items.append(item)
            if state == _SCHEDULED:
                return True
            self._state = _SCHEDULED
            actor = self._actor
        finally:
            lock.release()
        self._ready.put(actor)
        return True

    def get(self) -> Envelope[Any]:
        """Pop the oldest envelope; raises ``queue.Empty`` instead of blocking. Owning worker."""
        with self._lock:
            if not self._items:
                raise Empty
            item = self._items.popleft()
        return item if isinstance(item, Envelope) else Envelope(item)

    def empty(self) -> bool:
        """True if no envelope is queued. Any thread (a snapshot)."""
        return not self._items

    def _schedule_start(self) -> None:
        """Queue the actor's first turn (``on_start``). Starting thread, before any put."""
        with self._lock:
            self._state = _SCHEDULED
            actor = self._actor
        self._ready.put(actor)

    def _go_idle(self) -> bool:
        """Mark the inbox idle unless a put landed meanwhile (then False: keep going). Under the
        lock, so a concurrent put either is seen here or finds the inbox idle and reschedules
        the actor. Owning worker."""
        lock = self._lock
        lock.acquire()
        try:
            if self._items:
                return False
            self._items = None
            self._state = _IDLE
            return True
        finally:
            lock.release()

    def close_if_empty(self) -> bool:
        """Close for good if nothing is queued (True), atomically with every put: a put either
        landed before (False: the actor has a message to handle) or finds the inbox closed
        (and its sender learns so: ``tell`` raises ``ActorDeadError``). The owning worker,
        during a turn of its actor, which then stops at the end of that message."""
        with self._lock:
            if self._items or self._state == _CLOSED:
                return False
            self._state = _CLOSED
            self._items = None
            self._actor = None
        return True

    def _close(self) -> deque[Any] | None:
        """Close for good and hand back what was still queued. Owning worker."""
        with self._lock:
            self._state = _CLOSED
            items, self._items = self._items, None
            self._actor = None  # let the actor object be freed once nobody uses it
        return items


def _dead_error(ref: object) -> ActorDeadError:
    return ActorDeadError(f"{ref} stopped before handling the message")


def _reject_late(item: Any) -> None:
    """An item put after the actor closed: asks fail, tells are counted as dropped."""
    if isinstance(item, Envelope):
        if item.reply_to is not None:
            err = ActorDeadError("actor stopped before handling the message")
            item.reply_to.set_exception(exc_info=(ActorDeadError, err, None))
            return
        item = item.message
    logger.debug("dropped a message sent to a stopped pooled actor: {!r}", item)
    _note_dropped(None)


_dropped_lock = threading.Lock()
_late_dropped = 0  # tells put after their actor had closed (any pool)


def _note_dropped(pool: ActorPool | None) -> None:
    global _late_dropped  # noqa: PLW0603 - guarded by _dropped_lock
    with _dropped_lock:
        if pool is None:
            _late_dropped += 1
        else:
            pool._dropped += 1


# --------------------------------------------------------------------------- pool

_NEW: Final = "new"
_RUNNING: Final = "running"
_STOPPING: Final = "stopping"
_STOPPED: Final = "stopped"


class ActorPool:
    """A fixed set of worker threads that runs the turns of pooled actors.

    Lifecycle: ``start()`` (idempotent) → actors started with ``pool=...`` → ``stop()``, which
    stops every live actor of the pool (after the messages already queued to it, like
    ``ref.stop()``) and joins the workers, or ``abandon()``, which stops them at once, however
    many messages are queued, and hands the queued tells back to the caller. A stopped pool
    cannot be restarted.
    """

    def __init__(self, workers: int = 2, batch: int = 16, name: str = "kdispatch-pool") -> None:
        """Validate the configuration; starts nothing. Any thread."""
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InvalidConfigError(f"workers must be an int >= 1, got {workers!r}")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InvalidConfigError(f"batch must be an int >= 1, got {batch!r}")
        if not isinstance(name, str) or not name:
            raise InvalidConfigError(f"name must be a non-empty str, got {name!r}")
        self.workers: Final = workers
        """Number of worker threads."""
        self.batch: Final = batch
        """Most messages one actor handles per turn before yielding its worker."""
        self.name: Final = name
        """Prefix of the worker thread names."""
        self._ready: SimpleQueue[PooledActor | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._state: str = _NEW
        self._threads: list[threading.Thread] = []
        self._live: dict[int, PooledActor] = {}
        self._dropped = 0
        self._abandoned = False  # abandon(): workers run no further turn

    def __repr__(self) -> str:
        return (
            f"<ActorPool {self.name} {self._state} workers={self.workers} live={len(self._live)}>"
        )

    @property
    def dropped(self) -> int:
        """Tell messages passed to the default ``on_dropped`` of this pool's actors."""
        return self._dropped

    def start(self) -> None:
        """Start the worker threads (daemon threads named ``f"{name}-{i}"``). A second call does
        nothing; raises :class:`PoolStateError` once the pool is stopping or stopped. Any thread."""
        with self._lock:
            if self._state == _RUNNING:
                return
            if self._state != _NEW:
                raise PoolStateError(f"{self.name} is {self._state} and cannot be restarted")
            for i in range(self.workers):
                thread = threading.Thread(target=self._work, name=f"{self.name}-{i}", daemon=True)
                self._threads.append(thread)
            for thread in self._threads:
                thread.start()
            self._state = _RUNNING

    def stop(self, timeout: float | None = None) -> None:
        """Stop every live actor of the pool, then join the workers.

        Each actor gets a stop request behind the messages already in its inbox (as
        ``ref.stop()``); the pool waits for them and for the workers until ``timeout`` seconds
        have passed in total (``None``: no limit), and logs what is still running then. Safe to
        call more than once. Any thread except the pool's own workers (that would deadlock:
        raises :class:`PoolStateError`).
        """
        deadline = self._deadline_off_workers("stop", timeout)
        with self._lock:
            if self._state == _NEW:
                self._state = _STOPPED
                return
            first = self._state == _RUNNING
            self._state = _STOPPING
            actors = list(self._live.values())
        if first:
            futures = [actor.actor_ref.stop(block=False) for actor in actors]
            for future in futures:
                try:
                    future.get(timeout=_remaining(deadline))
                except pykka.Timeout:
                    break
        alive = self._join_workers(deadline, wake=first)
        if alive:
            logger.warning(
                "{} stop timed out: {} actors live, workers still running: {}",
                self.name,
                len(self._live),
                alive,
            )
        with self._lock:
            self._state = _STOPPED

    def abandon(self, timeout: float | None = None) -> list[tuple[PooledActor, list[Any]]]:
        """Stop the pool at once, however many messages are queued: no further turn starts.

        The workers finish the turn they are in (a turn is at most ``batch`` messages) and
        exit; they are joined until ``timeout`` seconds have passed (``None``: no limit). Then
        every live actor is stopped from this thread, without running any handler (no
        ``on_stop``, no ``on_dropped``): its inbox closes, queued asks resolve with
        ``ActorDeadError`` and queued stop requests with success. Returns each abandoned actor
        with the *tell* messages that were still queued, for the caller to settle (e.g. to
        resolve the futures they carry). Cost: a few microseconds per actor, nothing per
        queued turn. Any thread except the pool's own workers (raises :class:`PoolStateError`).
        """
        deadline = self._deadline_off_workers("abandon", timeout)
        with self._lock:
            if self._state == _NEW:
                self._state = _STOPPED
                return []
            self._state = _STOPPING
            self._abandoned = True  # a worker returns at its next get(), without running it
        while True:  # release the references the ready queue holds (before the sentinels)
            try:
                self._ready.get_nowait()
            except Empty:
                break
        alive = self._join_workers(deadline, wake=True)
        if alive:
            logger.warning("{} abandon: workers still running: {}", self.name, alive)
        actors = list(self._live.values())
        self._live.clear()
        _add_live(-len(actors))
        left = [(actor, actor._abandon()) for actor in actors]
        with self._lock:
            self._state = _STOPPED
        return left

    def live_count(self) -> int:
        """Actors started on this pool and not yet stopped. Any thread."""
        return len(self._live)

    # ----------------------------------------------------------------- internals

    def _deadline_off_workers(self, method: str, timeout: float | None) -> float | None:
        """Refuse ``method`` on one of the pool's own workers (:class:`PoolStateError`: it
        would wait for itself); else the monotonic deadline ``timeout`` seconds from now (None:
        no limit). The stopping thread."""
        if threading.current_thread() in self._threads:
            raise PoolStateError(f"{self.name}.{method}() called from its own worker thread")
        return None if timeout is None else time.monotonic() + max(0.0, timeout)

    def _join_workers(self, deadline: float | None, *, wake: bool) -> list[str]:
        """With ``wake``, hand every worker its stop sentinel; join the workers until
        ``deadline``; the names of those still running. The stopping thread."""
        if wake:
            for _ in self._threads:
                self._ready.put(None)
        for thread in self._threads:
            thread.join(_remaining(deadline))
        return [t.name for t in self._threads if t.is_alive()]

    def _register(self, actor: PooledActor) -> None:
        """Count a starting actor as live; raises if the pool is not running. Starting thread.

        No lock (for speed: actors start on the scheduling threads while others stop on the
        workers); the store, the pop and ``stop``'s ``list(values())`` snapshot are atomic
        (see :mod:`._compat`). The actor is added first and the state read after:
        :meth:`stop` changes the state before it takes its snapshot of the live actors, so an
        actor that saw the pool running is in the snapshot (and is stopped with the pool), and
        one that did not takes itself out."""
        key = id(actor)
        self._live[key] = actor
        if self._state != _RUNNING:
            self._live.pop(key, None)
            actor.actor_stopped.set()  # a stop() that saw it in its snapshot finds it dead
            raise PoolStateError(f"cannot start {actor} on {self.name}: pool is {self._state}")
        _add_live(1)

    def _unregister(self, actor: PooledActor) -> None:
        """Forget a stopped actor. The thread of its last turn; no lock (see ``_register``)."""
        if self._live.pop(id(actor), None) is not None:
            _add_live(-1)

    def _work(self) -> None:
        """Worker thread body: run actor turns until a ``None`` sentinel arrives."""
        ready = self._ready
        batch = self.batch
        while True:
            actor = ready.get()
            if actor is None or self._abandoned:
                return
            try:
                actor._run_turn(batch)
            except BaseException:
                logger.opt(exception=True).error("{}: error running a turn of {}", self.name, actor)


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


# --------------------------------------------------------------------------- actor

A = TypeVar("A", bound="PooledActor")


class PooledActorRef(ActorRef[A]):
    """pykka's ``ActorRef`` with a shorter ``tell`` path (same checks, no envelope allocated
    per tell), which also raises when the inbox has closed: a tell is either queued or
    refused, never dropped after the fact (what lets :mod:`.registry` route without a lock)."""

    def tell(self, message: Any) -> None:
        """Send without waiting; raises ``ActorDeadError`` if the actor has stopped or its inbox
        has closed (nothing was queued). Any thread."""
        if self.actor_stopped._flag:  # type: ignore[attr-defined]
            raise ActorDeadError(f"{self} not found")
        # A tell needs no envelope: the inbox keeps the bare message (wrapping only messages
        # that are themselves envelopes, so the worker can tell the two apart).
        if not self.actor_inbox._push(  # type: ignore[attr-defined]
            Envelope(message) if isinstance(message, Envelope) else message
        ):
            raise ActorDeadError(f"{self} not found")


class PooledActor(pykka.Actor):
    """A pykka actor whose messages are handled on the worker threads of an :class:`ActorPool`.

    Subclass it like ``pykka.ThreadingActor`` and call ``super().__init__(pool=pool)``; start it
    with ``MyActor.start(..., pool=pool)``. ``__init__`` runs on the starting thread; ``on_start``,
    ``on_receive``, proxied methods, ``on_stop``, ``on_failure`` and ``on_dropped`` run on a pool
    worker, one at a time per actor. Never block on another actor from those methods (see the
    module docstring).
    """

    __slots__ = (
        "_actor_ref",
        "_pool",
        "_pooled_started",
        "actor_inbox",
        "actor_stopped",
        "actor_urn",
    )

    _pool: ActorPool
    _pooled_started: bool

    def __init__(self, *, pool: ActorPool) -> None:
        """Bind the actor to ``pool`` and create its URN, inbox, stop flag and ref. Starting thread.

        Sets the same four fields as ``pykka.Actor.__init__`` (which is deliberately not called:
        it would build a full ``threading.Event`` and a ref only to throw them away).
        """
        if not isinstance(pool, ActorPool):
            raise InvalidInputError(f"pool must be an ActorPool, got {type(pool).__name__}")
        self._pool = pool
        self._pooled_started = False
        self.actor_urn = _new_urn()
        self.actor_inbox = self._create_actor_inbox()
        self.actor_stopped = LazyEvent()
        self._actor_ref = PooledActorRef(self)

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> ActorRef[Self]:
        """Create the actor (``cls(*args, **kwargs)``) and schedule ``on_start`` on its pool.

        Unlike pykka, the actor is not registered in ``pykka.ActorRegistry``. Raises
        :class:`PoolStateError` if the pool is not running. Any thread, a pooled actor's
        included (it never blocks).
        """
        obj = cls(*args, **kwargs)
        if getattr(obj, "_actor_ref", None) is None or getattr(obj, "_pool", None) is None:
            raise InvalidInputError(f"{cls.__name__}.__init__ must call super().__init__(pool=...)")
        obj._start_actor_loop()
        return obj.actor_ref

    def _create_actor_inbox(self) -> _PooledInbox:  # type: ignore[override]
        """pykka hook, here an instance method (the inbox schedules its actor on the pool).
        Called once from ``__init__``. Starting thread."""
        return _PooledInbox(self, self._pool._ready)

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        """pykka hook: futures for asks to this actor (pykka's ``ThreadingFuture``)."""
        return ThreadingFuture()

    def _start_actor_loop(self) -> None:
        """pykka hook: register with the pool and schedule the first turn. Starting thread."""
        self._pool._register(self)
        inbox = self.actor_inbox
        assert isinstance(inbox, _PooledInbox)
        inbox._schedule_start()

    # ----------------------------------------------------------------- the loop, one turn at a time

    def _run_turn(self, batch: int) -> None:
        """Handle up to ``batch`` messages, then requeue, go idle, or tear down. The pool
        worker that runs the turn.

        pykka's loop body, one envelope at a time, checking the stop flag before each.
        """
        inbox: _PooledInbox = self.actor_inbox  # type: ignore[assignment]
        stopped: LazyEvent = self.actor_stopped  # type: ignore[assignment]
        if not self._pooled_started:
            self._pooled_started = True
            self._actor_loop_setup()
        handle = self._handle_receive
        handled = 0
        while not stopped._flag:
            items = inbox._items
            if not items:
                if inbox._state == _CLOSED:  # it left during this turn (close_if_empty)
                    self._stop()
                    break
                if inbox._go_idle():
                    return
                continue  # a put landed meanwhile
            if handled == batch:  # fairness: to the back of the ready queue (still scheduled)
                inbox._ready.put(self)
                return
            item = items.popleft()  # only this worker pops; atomic against a put's append
            handled += 1
            if isinstance(item, Envelope):
                message, reply_to = item.message, item.reply_to
            else:
                message, reply_to = item, None
            try:
                response = handle(message)
                if reply_to is not None:
                    reply_to.set(response)
            except Exception:
                self._handler_raised(reply_to)
            except BaseException as exc:
                self._handler_raised_fatal(reply_to, exc)
        self._teardown(inbox)

    def _handle_receive(self, message: Any) -> Any:
        """pykka hook: one ``isinstance`` for plain messages, pykka's own handling for its
        stop and proxy messages. The turn's thread."""
        if isinstance(message, PYKKA_MESSAGES):
            return super()._handle_receive(message)
        return self.on_receive(message)

    def _handler_raised(self, reply_to: pykka.Future[Any] | None) -> None:
        """An ``Exception`` from a handler (pykka semantics): to the asker, or ``on_failure`` and
        stop for a tell. The turn's thread, inside the ``except`` block."""
        if reply_to is not None:
            logger.opt(exception=True).debug("exception returned from {} to caller", self)
            try:
                reply_to.set_exception()
            except Exception:  # the future was already resolved (by the handler itself)
                logger.opt(exception=True).error("cannot report an exception of {}", self)
            return
        exc_info = sys.exc_info()
        self._handle_failure(*exc_info)
        try:
            self.on_failure(*exc_info)
        except Exception:
            self._handle_failure(*sys.exc_info())

    def _handler_raised_fatal(self, reply_to: pykka.Future[Any] | None, exc: BaseException) -> None:
        """A ``BaseException`` from a handler: stop this actor only (pykka would stop every
        actor in its registry); an asker gets ``ActorDeadError``. The turn's thread."""
        logger.opt(exception=True).error("{!r} in {}: stopping this actor", exc, self)
        if reply_to is not None:
            err = ActorDeadError(f"{self} stopped by {exc!r}")
            try:
                reply_to.set_exception(exc_info=(ActorDeadError, err, None))
            except Exception:
                logger.opt(exception=True).error("cannot report a stop of {}", self)
        self._stop()

    def _teardown(self, inbox: _PooledInbox) -> None:
        """Close the inbox and answer what is left in it (see module docstring). The turn's
        thread."""
        self._pool._unregister(self)
        items = inbox._close()
        if not items:
            return
        ref = self._actor_ref
        for item in items:
            reply_to = item.reply_to if isinstance(item, Envelope) else None
            if reply_to is not None:
                if isinstance(item.message, ActorStop):
                    reply_to.set(None)
                else:
                    err = _dead_error(ref)
                    reply_to.set_exception(exc_info=(ActorDeadError, err, None))
            else:
                message = item.message if isinstance(item, Envelope) else item
                try:
                    self.on_dropped(message)
                except Exception:
                    logger.opt(exception=True).error("on_dropped of {} failed", self)

    def _abandon(self) -> list[Any]:
        """Stop now without running a handler: close the inbox, answer its queued asks (stop
        requests with success, others with ``ActorDeadError``) and return its queued tells.
        The thread of :meth:`ActorPool.abandon`, which has already taken the actor out of the
        pool's live count, once no worker runs a turn."""
        self.actor_stopped.set()
        items = self.actor_inbox._close()  # type: ignore[attr-defined]
        tells: list[Any] = []
        if not items:
            return tells
        ref = self._actor_ref
        for item in items:
            if not isinstance(item, Envelope):
                tells.append(item)
            elif item.reply_to is None:
                tells.append(item.message)
            elif isinstance(item.message, ActorStop):
                item.reply_to.set(None)
            else:
                err = _dead_error(ref)
                item.reply_to.set_exception(exc_info=(ActorDeadError, err, None))
        return tells

    def _mark_stopped(self) -> None:
        """Set ``actor_stopped`` and stop counting the actor as live. The turn's thread."""
        if not self.actor_stopped.is_set():
            self.actor_stopped.set()
            self._pool._unregister(self)

    def stop(self) -> None:
        """pykka's ``Actor.stop``: queue a stop request behind the messages already queued. An
        actor whose inbox was closed during this turn (it left its registry: see
        ``_PooledInbox.close_if_empty``) stops at the end of the turn anyway, so there it does
        nothing. The turn's thread (the actor's own turn)."""
        try:
            self.actor_ref.tell(ActorStop())
        except ActorDeadError:
            inbox: _PooledInbox = self.actor_inbox  # type: ignore[assignment]
            if inbox._state != _CLOSED:
                raise

    def _stop(self) -> None:
        """pykka hook: stop now (no global registry), then run ``on_stop``. The turn's thread."""
        self._mark_stopped()
        logger.debug("stopped {}", self)
        try:
            self.on_stop()
        except Exception:
            self._handle_failure(*sys.exc_info())

    def _handle_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """pykka hook: log an unhandled exception and stop the actor. The turn's thread."""
        logger.opt(exception=(exception_type, exception_value, traceback)).error(
            "unhandled exception in {}", self
        )
        self._mark_stopped()

    def on_dropped(self, message: object) -> None:
        """Called for each *tell* still queued when the actor stops or fails (asks resolve with
        ``ActorDeadError`` instead). Default: log at debug level and count in
        ``pool.dropped``. The turn's thread, in actor context, after ``on_stop``/``on_failure``."""
        logger.debug("{} dropped {!r}", self, message)
        _note_dropped(self._pool)
