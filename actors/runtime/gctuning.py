"""Garbage-collector settings of a dispatcher, process-wide (see
:class:`~kdispatch.RuntimeConfig`): freeze the survivors of each generation-1 collection, so a
full collection stays about as cheap as a young one, and the young-generation threshold.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from kdispatch.actors.model.config import RuntimeConfig


def freeze_young() -> None:
    """Any thread. Collect generations 0 and 1, then freeze everything alive. Cost: the young
    collection (bounded by the young thresholds), never a full one."""
    gc.collect(1)
    gc.freeze()


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """Caller thread. No automatic collection runs inside the block (process-wide: keep it
    short). A bulk teardown allocates and frees in a burst that would otherwise trigger full
    collections over every live object (0.7 s measured with 20,000 pending calls). Re-enables
    the collector on exit only if it was enabled on entry."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class GcTuner:
    """Applies a :class:`RuntimeConfig`'s GC settings between :meth:`start` and :meth:`stop`.

    With ``gc_freeze``, :meth:`start` freezes once and installs a ``gc.callbacks`` hook that
    freezes after every collection of generation 1; :meth:`stop` removes it and unfreezes (after
    any freeze, explicit ones included). With ``gc_young_threshold``, the first threshold is set
    at start and the previous ones restored at stop. Without either, every method but
    :meth:`freeze` does nothing.
    """

    def __init__(self, config: RuntimeConfig) -> None:
        self._config = config
        self._saved: tuple[int, int, int] | None = None
        self._hooked = False
        self.freezes = 0
        """Freezes done so far (start, explicit and after generation-1 collections)."""

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
        """Any thread. Freeze now (see :func:`freeze_young`)."""
        freeze_young()
        self.freezes += 1

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks`` hook, on whichever thread the collection ran: once a collection of
        generation 1 finished, freeze its survivors (and whatever else is alive)."""
        if phase == "stop" and info.get("generation") == 1:
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
