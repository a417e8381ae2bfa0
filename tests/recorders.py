"""Informer handlers for tests that record what they saw and wake whoever waits for it, and a
source wrapper that keeps an informer away from the server while a test changes it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from kdispatch.adapters.informer import Informer, ListWatch, WatchStream

Event = tuple[str, str, str, str]
"""``(event, name, uid, resourceVersion)``."""


RELISTED_WHILE_AWAY = [
    ("delete", "a"),
    ("delete", "b"),
    ("add", "b"),
    ("update", "c"),
    ("add", "e"),
]
"""The informer tests' 410 Gone scenario: objects a, b, c and d are listed; while the informer
is kept away, a and b are deleted, b is created again, c is updated and e created, and the
history is compacted. These are the events the re-list must turn that into, in order."""


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
T = TypeVar("T")


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


class GatedListWatch:
    """Wraps a source; ``watch`` blocks while the gate is closed (signalling ``entered``) and
    signals ``opened`` once the server has the watch (the HTTP server registers it before it
    sends the reply headers). ``watch`` runs on the informer's thread; the test thread opens
    and closes the gate. Waits are bounded by ``timeout`` seconds."""

    def __init__(self, inner: ListWatch, timeout: float = 20.0) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.timeout = timeout
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.opened = threading.Event()
        # the next watch starts here instead, and so does every later one from the same
        # resourceVersion: as if the informer had last seen ``resume_from``
        self.resume_from: str | None = None
        self._instead: tuple[str, str] | None = None

    def list(self) -> tuple[list[dict[str, Any]], str]:
        return self.inner.list()

    def watch(self, resource_version: str, timeout_seconds: float) -> WatchStream:
        self.entered.set()
        assert self.gate.wait(self.timeout)
        if self.resume_from is not None:
            self._instead, self.resume_from = (resource_version, self.resume_from), None
        if self._instead is not None and resource_version == self._instead[0]:
            resource_version = self._instead[1]
        stream = self.inner.watch(resource_version, timeout_seconds)
        self.opened.set()
        return stream

    def keep_away(self, end_watch: Callable[[], T] | None = None) -> T | None:
        """Once a watch is open, close the gate and end that watch (``end_watch``, or wait for
        it to time out); return when the informer's next watch waits at the gate, with what
        ``end_watch`` returned. Test thread."""
        assert self.opened.wait(self.timeout)
        self.gate.clear()
        self.entered.clear()
        ended = end_watch() if end_watch is not None else None
        assert self.entered.wait(self.timeout)
        return ended
