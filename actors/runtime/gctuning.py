"""Garbage-collector settings of a dispatcher, process-wide (see
:class:`~kdispatch.RuntimeConfig`): freeze the survivors of every collection, so no collection
scans more than the objects allocated since the last one, and the young-generation threshold.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from kdispatch.actors.model.config import RuntimeConfig


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """Caller thread. No automatic collection runs inside the block (process-wide: keep it
    short, e.g. a bulk teardown); the collector is re-enabled only if it was enabled."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class GcTuner:
    """Applies a :class:`RuntimeConfig`'s GC settings from :meth:`start` to :meth:`stop`:
    ``gc_freeze`` freezes at start and after every collection (a ``gc.callbacks`` hook),
    ``gc_young_threshold`` sets the first threshold; :meth:`stop` unfreezes (after any freeze)
    and restores the thresholds."""

    def __init__(self, config: RuntimeConfig) -> None:
        self._config = config
        self._saved: tuple[int, int, int] | None = None
        self._hooked = False
        self.freezes = 0
        """Freezes done so far (start, explicit and after collections)."""

    def start(self) -> None:
        """Caller thread (``Dispatcher.start``)."""
        cfg = self._config
        if cfg.gc_young_threshold is not None:
            self._saved = gc.get_threshold()
            _, second, third = self._saved
            gc.set_threshold(cfg.gc_young_threshold, second, third)
        if cfg.gc_freeze:
            self.freeze()
            gc.callbacks.append(self._after_collection)
            self._hooked = True

    def freeze(self) -> None:
        """Any thread. Collect generations 0 and 1 (never a full collection), then freeze
        everything alive."""
        gc.collect(1)
        gc.freeze()
        self.freezes += 1

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks`` hook, on the collecting thread: freeze what survived, so the next
        collection scans only what was allocated since (survivors left in generation 1 made its
        collections the longest pauses: docs/benchmarks.md, "GC pauses at scale")."""
        del info
        if phase == "stop":
            gc.freeze()
            self.freezes += 1

    def stop(self) -> None:
        """Caller thread (``Dispatcher.stop``). Idempotent."""
        if self._hooked:
            gc.callbacks.remove(self._after_collection)
            self._hooked = False
        if self.freezes:
            gc.unfreeze()
            self.freezes = 0
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
