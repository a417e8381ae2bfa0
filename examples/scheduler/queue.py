"""The scheduling queue: pods waiting for a cycle, pods backing off, and continuations.

* *active*: a heap ordered by priority (higher first), FIFO within a priority;
* *backoff*: pods that failed a cycle, each with the time it may be retried. Pods that were
  *unschedulable* (nothing fit) are retried when their backoff ends, and earlier when the
  cluster changes in a way that may make them fit (:meth:`SchedulingQueue.move_unschedulable`:
  a node added, or a bound pod deleted for pods that lacked resources), as kube-scheduler's
  queue moves them on cluster events;
* *tasks*: continuations (a binding, a victim's preemption whose future resolved) —
  scheduling threads run them before starting new cycles, so in-flight bindings finish first.

One entry per pod: adding a pod that is already queued is a no-op, and removed or moved entries
are dropped lazily when they reach the top of a heap. Thread-safe: producers are the informer
thread, scheduling threads and future callbacks (which only ``post``); consumers are the
scheduling threads, blocked in :meth:`pop`.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable

Task = Callable[[], None]


class SchedulingQueue:
    """Priority queue with backoff and a continuation lane (see module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._active: list[tuple[int, int, str]] = []  # (-priority, seq, uid)
        self._backoff: list[tuple[float, int, str, int]] = []  # (ready_at, seq, uid, priority)
        self._tasks: deque[Task] = deque()
        self._live: dict[str, tuple[int, bool]] = {}  # uid -> (seq of live entry, in backoff)
        # unschedulable pods backing off: uid -> (priority, a pod deletion may make it fit)
        self._unschedulable: dict[str, tuple[int, bool]] = {}
        self._seq = itertools.count()
        self._closed = False

    # ------------------------------------------------------------------ producers

    def add(self, uid: str, priority: int) -> bool:
        """Any thread. Queue a pod for a cycle now; False if it is already queued."""
        with self._cond:
            if uid in self._live or self._closed:
                return False
            self._push_active(uid, priority)
            self._cond.notify()
            return True

    def backoff(
        self,
        uid: str,
        priority: int,
        delay: float,
        *,
        unschedulable: bool = False,
        on_pod_delete: bool = False,
    ) -> None:
        """Any thread. Queue a pod for a cycle after ``delay`` seconds (replaces any entry).
        ``unschedulable``: nothing fit; :meth:`move_unschedulable` may retry it earlier (on a
        pod deletion only with ``on_pod_delete``)."""
        with self._cond:
            if self._closed:
                return
            seq = next(self._seq)
            self._live[uid] = (seq, True)
            if unschedulable:
                self._unschedulable[uid] = (priority, on_pod_delete)
            else:
                self._unschedulable.pop(uid, None)
            heapq.heappush(self._backoff, (self._clock() + delay, seq, uid, priority))
            self._cond.notify()

    def activate(self, uid: str, priority: int) -> bool:
        """Any thread. Move a backing-off pod to the active heap now; False if it was not
        backing off."""
        with self._cond:
            entry = self._live.get(uid)
            if entry is None or not entry[1] or self._closed:
                return False
            self._push_active(uid, priority)
            self._cond.notify()
            return True

    def move_unschedulable(self, *, pod_deleted: bool) -> int:
        """Any thread (informer). A cluster event: a node was added (``pod_deleted`` False) or
        a bound pod deleted. The unschedulable pods it may help go to the active heap now,
        before their backoff ends. Returns how many moved."""
        with self._cond:
            if self._closed:
                return 0
            moved = [
                (uid, prio)
                for uid, (prio, on_delete) in self._unschedulable.items()
                if on_delete or not pod_deleted
            ]
            for uid, prio in moved:
                self._push_active(uid, prio)
            if moved:
                self._cond.notify_all()
            return len(moved)

    def remove(self, uid: str) -> None:
        """Any thread. Drop a pod's entry (deleted, or bound by someone else)."""
        with self._cond:
            self._live.pop(uid, None)
            self._unschedulable.pop(uid, None)

    def post(self, task: Task) -> None:
        """Any thread, including future callbacks on foreign threads (never blocks). Run
        ``task`` on a scheduling thread before the next cycle."""
        with self._cond:
            self._tasks.append(task)
            self._cond.notify()

    @property
    def closed(self) -> bool:
        """Any thread. True once :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Any thread. Wake every consumer; :meth:`pop` returns None from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _push_active(self, uid: str, priority: int) -> None:
        self._unschedulable.pop(uid, None)
        seq = next(self._seq)
        self._live[uid] = (seq, False)
        heapq.heappush(self._active, (-priority, seq, uid))

    # ------------------------------------------------------------------ consumers

    def pop(self, timeout: float | None = None) -> Task | str | None:
        """Scheduling thread. The next continuation, else the next pod uid; blocks up to
        ``timeout`` seconds (None: until something arrives or the queue closes). Returns None
        on timeout or once closed."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while not self._closed:
                if self._tasks:
                    return self._tasks.popleft()
                now = self._clock()
                next_due = self._promote(now)
                while self._active:
                    _, seq, uid = heapq.heappop(self._active)
                    if self._live.get(uid) == (seq, False):
                        del self._live[uid]
                        return uid
                wait = None if next_due is None else max(0.0, next_due - now)
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)
            return None

    def _promote(self, now: float) -> float | None:
        """Move due backoff entries to the active heap; when the next one is due. Lock held."""
        heap = self._backoff
        while heap and heap[0][0] <= now:
            _, seq, uid, priority = heapq.heappop(heap)
            if self._live.get(uid) == (seq, True):
                self._push_active(uid, priority)
        while heap and self._live.get(heap[0][2]) != (heap[0][1], True):
            heapq.heappop(heap)  # drop stale entries so the wait is not cut short by them
        return heap[0][0] if heap else None

    # ------------------------------------------------------------------ introspection

    def counts(self) -> tuple[int, int, int]:
        """Any thread. ``(active pods, backing-off pods, continuations)``."""
        with self._cond:
            backing = sum(1 for _, in_backoff in self._live.values() if in_backoff)
            return len(self._live) - backing, backing, len(self._tasks)
