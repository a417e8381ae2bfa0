"""Watch streams of the in-memory apiserver.

A :class:`Watch` owns an unbounded queue: the server appends events to it while holding its own
lock (so every watch sees events in resourceVersion order and a slow consumer never blocks a
writer), and the consumer takes them on its own thread. Lock order is always server lock, then
the watch's lock; the watch never calls into the server while holding its lock.

When a watch ends — :meth:`Watch.stop` by the consumer, the server dropping it to simulate a
lost connection, or its queue overflowing the optional ``limit`` (as the apiserver closes watches
that cannot keep up) — events still queued are discarded, as they would be on a broken connection:
the consumer resumes by watching again from the last resourceVersion it processed.

The ``limit`` counts live events only. A watch's initial events (the replay since its
resourceVersion, or the current objects for ``"0"``) are queued as ``initial`` and never overflow
it: kube-apiserver sends them with backpressure, the consumer's pace (the watch cache's
``cacheWatcher.processInterval`` blocks on the result channel; only live events offered to a full
input buffer close a watcher "due to unresponsiveness", ``cacheWatcher.add``), so a resumed
watch always gets through its replay and a consumer that falls behind still makes progress.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from kdispatch.actors.model.errors import InvalidInputError

from .memory_objects import clone

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change: ``object`` is the consumer's own copy of the object after the change (for
    DELETED, the last state with the deletion's resourceVersion)."""

    type: EventType
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        """``object.metadata.resourceVersion``."""
        return str(self.object["metadata"]["resourceVersion"])


class Watch:
    """An iterator of :class:`WatchEvent` for one kind (and optionally one namespace).

    Created by :meth:`InMemoryApiServer.watch`. ``next``/iteration run on the consumer's thread;
    ``stop`` may be called from any thread and wakes a blocked consumer.
    """

    def __init__(
        self,
        kind: str,
        namespace: str | None,
        on_stop: Callable[[Watch], None],
        limit: int | None = None,
        predicate: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.kind = kind
        self._predicate = predicate
        self.namespace = namespace
        self._on_stop = on_stop
        self._limit = limit
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[tuple[EventType, dict[str, Any]]] = deque()
        self._ended = False
        self._dropped = False
        self._initial = 0  # initial events at the head of the queue: outside the limit

    # ----------------------------------------------------------------- server side

    def matches(self, namespace: str) -> bool:
        """Whether an event in ``namespace`` belongs to this watch. Any thread."""
        return self.namespace is None or self.namespace == namespace

    def push(
        self,
        event_type: EventType,
        obj: dict[str, Any],
        old: dict[str, Any] | None = None,
        *,
        initial: bool = False,
    ) -> bool:
        """Queue one event; ``obj`` is an immutable snapshot (``old``: the state before a
        MODIFIED). With a selector, only matching objects pass: a MODIFIED that makes an object
        match becomes ADDED, one that makes it stop matching DELETED. ``initial``: one of the
        watch's initial events, queued before any live one and not counted against the limit.
        Returns False once the watch has ended (a live event that finds the limit reached ends
        it as dropped). Runs on a writer thread (``initial``: the one opening the watch) under
        the server lock."""
        if self._predicate is not None:
            now = self._predicate(obj)
            before = old is not None and self._predicate(old)
            if event_type == "MODIFIED":
                if not now and not before:
                    return not self.ended
                if now and not before:
                    event_type = "ADDED"
                elif before and not now:
                    event_type = "DELETED"
            elif not now:
                return not self.ended
        with self._cond:
            if self._ended:
                return False
            if (
                not initial
                and self._limit is not None
                and len(self._queue) - self._initial >= self._limit
            ):
                self._ended = self._dropped = True
                self._queue.clear()
                self._initial = 0
                self._cond.notify_all()
                return False
            self._queue.append((event_type, obj))
            if initial:
                self._initial += 1
            self._cond.notify()
            return True

    def end(self, *, dropped: bool) -> bool:
        """End the stream and discard queued events; False if it had already ended. Runs on
        any thread (under the server lock when the server drops it)."""
        with self._cond:
            if self._ended:
                return False
            self._ended = True
            self._dropped = dropped
            self._queue.clear()
            self._initial = 0
            self._cond.notify_all()
            return True

    # ----------------------------------------------------------------- consumer side

    def next(self, timeout: float | None = None) -> WatchEvent | None:
        """The next event, waiting up to ``timeout`` seconds (None: forever). Returns None on
        timeout or once the watch has ended (check :attr:`ended`). Consumer thread."""
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or math.isnan(timeout)
            or timeout < 0
        ):
            raise InvalidInputError(f"timeout must be None or a number >= 0, got {timeout!r}")
        with self._cond:
            if not self._queue and not self._ended:
                self._cond.wait_for(lambda: bool(self._queue) or self._ended, timeout)
            if self._ended or not self._queue:
                return None
            event_type, obj = self._queue.popleft()
            self._initial = max(self._initial - 1, 0)
        return WatchEvent(event_type, clone(obj))

    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __next__(self) -> WatchEvent:
        """Block for the next event; ``StopIteration`` once stopped or dropped."""
        event = self.next(None)
        if event is None:
            raise StopIteration
        return event

    def stop(self) -> None:
        """End the watch (idempotent) and unregister it from the server. Any thread."""
        if self.end(dropped=False):
            self._on_stop(self)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def ended(self) -> bool:
        """True once stopped or dropped."""
        with self._cond:
            return self._ended

    @property
    def dropped(self) -> bool:
        """True if the server ended this watch (:meth:`InMemoryApiServer.drop_watches`, or
        the consumer fell more than the server's ``watch_queue_limit`` live events behind)."""
        with self._cond:
            return self._dropped

    def pending(self) -> int:
        """Events queued and not yet taken. Any thread."""
        with self._cond:
            return len(self._queue)
