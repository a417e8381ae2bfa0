"""``GcWatch``: how long the cyclic garbage collector stopped the process, per generation.

A ``gc.callbacks`` hook times every collection from its ``start`` to its ``stop`` phase (the
collector holds the interpreter lock throughout, so every thread is stopped for that long).
Used by the stress run, the main job and the benchmarks to report the longest full (generation 2)
pause next to the longest single ``submit()``. Install it with ``with GcWatch() as watch:``.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any, Self


class GcWatch:
    """Collections and their pauses while installed. The callback runs on whichever thread
    triggered the collection; readers may call :meth:`summary` from any thread."""

    def __init__(self) -> None:
        # Reentrant: a collection can start while a reader holds the lock (summary() allocates),
        # and its callback then runs on that same thread and takes the lock again.
        self._lock = threading.RLock()
        self._started: dict[int, float] = {}  # thread id -> perf_counter at "start"
        self.pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        """Seconds per collection, by generation."""

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter()
        tid = threading.get_ident()
        if phase == "start":
            self._started[tid] = now
            return
        began = self._started.pop(tid, None)
        if began is not None:
            with self._lock:
                self.pauses[int(info["generation"])].append(now - began)

    def install(self) -> Self:
        """Start recording (idempotent)."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        return self

    def uninstall(self) -> None:
        """Stop recording (idempotent)."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def __enter__(self) -> Self:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def reset(self) -> None:
        """Forget the collections recorded so far."""
        with self._lock:
            for pauses in self.pauses.values():
                pauses.clear()

    def longest_ms(self, generation: int) -> float:
        """The longest pause of ``generation`` in ms (0.0 when there was none)."""
        with self._lock:
            return max(self.pauses[generation], default=0.0) * 1000.0

    def summary(self) -> dict[str, Any]:
        """JSON-ready: per generation the number of collections, their total and longest ms."""
        with self._lock:
            return {
                f"gen{g}": {
                    "collections": len(p),
                    "total_ms": round(sum(p) * 1000.0, 3),
                    "max_ms": round(max(p, default=0.0) * 1000.0, 3),
                }
                for g, p in self.pauses.items()
            }
