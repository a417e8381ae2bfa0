"""The dispatcher's housekeeper: one ``pykka.ThreadingActor`` that reaps idle object actors
every ``interval`` seconds on its own thread. It is never on a call's path.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import pykka
from loguru import logger

from kdispatch.actors.model.config import MAX_WAIT

from .registry import Registry

__all__ = ["Housekeeper"]

_TICK: Final = "tick"


class Housekeeper(pykka.ThreadingActor):
    """Reaps the idle object actors of one registry every ``interval`` seconds, until
    ``winding_down`` is set (then stop it: ``ActorRef.stop``). Its methods run on its own
    thread (pykka's), a daemon like every kdispatch thread: a program that ends without
    ``stop()`` is not held up by it."""

    use_daemon_thread = True

    def __init__(self, registry: Registry, interval: float, winding_down: threading.Event):
        super().__init__()
        self._registry = registry
        self._interval = min(interval, MAX_WAIT)  # longer: as long as an event can wait
        self._winding_down = winding_down

    def on_start(self) -> None:
        """Its thread: the first pass comes after one interval."""
        self.actor_ref.tell(_TICK)

    def on_receive(self, message: Any) -> None:
        """Its thread: wait one interval (unless winding down), reap, and tick again."""
        if message != _TICK or self._winding_down.wait(self._interval):
            return
        try:
            self._registry.reap_idle()
        except Exception:  # pragma: no cover - defensive: the next pass tries again
            logger.opt(exception=True).error("reaping idle actors failed")
        self.actor_ref.tell(_TICK)
