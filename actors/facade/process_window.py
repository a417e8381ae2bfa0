"""The send window of :class:`~kdispatch.ProcessDispatcher` (docs/process-dispatcher.md,
"Back-pressure"): at most ``limit`` calls in the child; the others wait in lanes by relevance.
One object's calls leave in submission order: a call joins its object's waiting calls' lane
when that is higher, and lifts them into its own when its own is. One lock; ``send`` (a
non-blocking queue put) runs under it, so calls reach the writer in the order they left.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kdispatch.actors.model.calls import BEST_EFFORT


@dataclass(eq=False, slots=True)
class Waiting:
    """A call waiting in the parent: its future's id, object, type, lane and pickled message."""

    fid: int
    uid: str
    call_type: str
    lane: int
    data: bytes
    gone: bool = False
    """Sent or withdrawn: left behind in a lane's deque, skipped when reached."""


class SendWindow:
    """Calls in flight to the child (at most ``limit``, best-effort ones at most
    ``best_effort_limit``; None: no limit) and the calls waiting for room. Every method may be
    called from any thread and never blocks."""

    def __init__(
        self,
        limit: int | None,
        send: Callable[[bytes], None],
        best_effort_limit: int | None = None,
    ) -> None:
        self._limit = limit
        self._best_effort_limit = best_effort_limit
        self._send = send
        self._lock = threading.Lock()
        self._sent: set[int] = set()
        self._best_effort: set[int] = set()  # the best-effort calls among _sent
        self._lanes: dict[int, deque[Waiting]] = {}
        self._by_uid: dict[str, list[Waiting]] = {}
        self._by_fid: dict[int, Waiting] = {}
        self._closed = False

    @property
    def in_flight(self) -> int:
        """Calls sent and not yet resolved."""
        return len(self._sent)

    @property
    def waiting(self) -> int:
        """Calls waiting in the parent."""
        return len(self._by_fid)

    def submit(self, fid: int, uid: str, call_type: str, relevance: int, data: bytes) -> None:
        """Any thread. Send the call now if there is room and nothing waits, else queue it."""
        with self._lock:
            if not self._by_fid and not self._full(relevance):
                self._put(fid, relevance, data)
                return
            mine = self._by_uid.setdefault(uid, [])
            lane = max(relevance, mine[-1].lane) if mine else relevance
            if mine and mine[-1].lane < lane:  # lift the object's earlier calls, in order
                for i, w in enumerate(mine):
                    w.gone = True
                    mine[i] = Waiting(w.fid, uid, w.call_type, lane, w.data)
                    self._queue(mine[i])
            entry = Waiting(fid, uid, call_type, lane, data)
            self._queue(entry)
            mine.append(entry)
            self._release()

    def resolved(self, *fids: int) -> None:
        """Reader thread: the child resolved calls ``fids`` (ids it never got are ignored);
        their room goes to the next waiting calls, in one lock hold per batch."""
        with self._lock:
            freed = False
            for fid in fids:
                if fid in self._sent:
                    self._sent.discard(fid)
                    self._best_effort.discard(fid)
                    freed = True
            if freed:
                self._release()

    def withdraw(self, uid: str, call_type: str | None = None) -> list[tuple[int, str]]:
        """Any thread. Take the object's waiting calls (of ``call_type``, or all) out of the
        window; their ids and types, for the caller to resolve."""
        with self._lock:
            mine = self._by_uid.get(uid)
            if not mine:
                return []
            taken = [w for w in mine if call_type is None or w.call_type == call_type]
            for w in taken:
                self._forget(w)
            return [(w.fid, w.call_type) for w in taken]

    def discard(self, fid: int) -> None:
        """Any thread. Forget call ``fid`` (resolved by the parent): neither sent nor waiting."""
        with self._lock:
            self._sent.discard(fid)
            self._best_effort.discard(fid)
            entry = self._by_fid.get(fid)
            if entry is not None:
                self._forget(entry)

    def withdraw_all(self) -> list[tuple[int, str]]:
        """Any thread. Take every waiting call out (ids and types, for the caller to resolve)."""
        with self._lock:
            return self._clear()

    def flush(self) -> None:
        """Any thread. Send every waiting call now, in lane order, whatever the limit."""
        with self._lock:
            self._release(everything=True)

    def close(self) -> list[tuple[int, str]]:
        """Any thread. Nothing is sent any more; the waiting calls, as :meth:`withdraw_all`."""
        with self._lock:
            self._closed = True
            return self._clear()

    def abandon(self) -> list[tuple[int, str]]:
        """Any thread, once the child is gone: as :meth:`close`, and the calls sent are no
        longer in flight (nothing will answer them)."""
        with self._lock:
            self._closed = True
            self._sent.clear()
            self._best_effort.clear()
            return self._clear()

    # ------------------------------------------------------------------ lock held

    def _full(self, lane: int) -> bool:
        """No room for a call of ``lane``."""
        if self._closed or (self._limit is not None and len(self._sent) >= self._limit):
            return True
        cap = self._best_effort_limit
        return lane == BEST_EFFORT and cap is not None and len(self._best_effort) >= cap

    def _put(self, fid: int, lane: int, data: bytes) -> None:
        self._sent.add(fid)
        if lane == BEST_EFFORT:
            self._best_effort.add(fid)
        self._send(data)

    def _clear(self) -> list[tuple[int, str]]:
        taken = [(w.fid, w.call_type) for w in self._by_fid.values()]
        self._lanes.clear()
        self._by_uid.clear()
        self._by_fid.clear()
        return taken

    def _queue(self, entry: Waiting) -> None:
        self._by_fid[entry.fid] = entry
        lane = self._lanes.get(entry.lane)
        if lane is None:
            lane = self._lanes[entry.lane] = deque()
            self._lanes = dict(sorted(self._lanes.items(), reverse=True))
        lane.append(entry)

    def _forget(self, entry: Waiting) -> None:
        entry.gone = True
        del self._by_fid[entry.fid]
        mine = self._by_uid[entry.uid]
        mine.remove(entry)
        if not mine:
            del self._by_uid[entry.uid]

    def _release(self, *, everything: bool = False) -> None:
        """Send waiting calls, highest lane first, while there is room (``everything``: all)."""
        for relevance, lane in self._lanes.items():
            while lane and (everything or not self._full(relevance)):
                entry = lane.popleft()
                if entry.gone:
                    continue
                self._forget(entry)
                self._put(entry.fid, relevance, entry.data)
            if lane and not everything:
                return
