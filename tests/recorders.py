"""Informer handlers for tests that record what they saw and wake whoever waits for it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from kdispatch.adapters.informer import Informer, ListWatch

Event = tuple[str, str, str, str]
"""``(event, name, uid, resourceVersion)``."""


class Recorder:
    """Handlers that record ``(event, name, uid, resourceVersion)`` and wake waiters; a test
    waits for what it expects with a deadline (``timeout`` seconds), never by sleeping."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.events: list[Event] = []
        self.objects: list[dict[str, Any]] = []
        self._cond = threading.Condition()

    def _record(self, what: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        with self._cond:
            self.events.append((what, meta["name"], meta["uid"], meta["resourceVersion"]))
            self.objects.append(obj)
            self._cond.notify_all()

    def on_add(self, obj: dict[str, Any]) -> None:
        self._record("add", obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        assert old["metadata"]["uid"] == new["metadata"]["uid"]
        self._record("update", new)

    def on_delete(self, obj: dict[str, Any]) -> None:
        self._record("delete", obj)

    def wait(self, predicate: Callable[[list[Event]], bool]) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.events), self.timeout)

    def wait_count(self, n: int) -> bool:
        return self.wait(lambda ev: len(ev) >= n)

    def wait_name(self, name: str) -> bool:
        """Waits for an event of object ``name``."""
        return self.wait(lambda ev: any(e[1] == name for e in ev))

    def names(self) -> list[tuple[str, str]]:
        """``(event, name)`` of every recorded event."""
        with self._cond:
            return [(e[0], e[1]) for e in self.events]


R = TypeVar("R", bound=Recorder)


@contextmanager
def running_informers(
    recorder: Callable[[], R], prefix: str, stop_timeout: float, **defaults: Any
) -> Iterator[Callable[..., tuple[Informer, R]]]:
    """A starter of informers, each with a fresh ``recorder()`` attached and ``defaults`` under
    its own keyword arguments; on exit every started informer must stop within ``stop_timeout``."""
    started: list[Informer] = []

    def start(lw: ListWatch, **kwargs: Any) -> tuple[Informer, R]:
        rec = recorder()
        inf = Informer(lw, name=f"{prefix}-{len(started)}", **{**defaults, **kwargs})
        inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
        started.append(inf)
        inf.start()
        return inf, rec

    yield start
    for inf in started:
        assert inf.stop(timeout=stop_timeout)
