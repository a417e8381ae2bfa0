"""Watch-side threads of the chaos run: the binding auditor and the watch monkey.

:class:`BindingAuditor` follows every Pod change on the in-memory apiserver (its own watch, not
the dispatcher's informer) and records each ``spec.nodeName`` a pod ever had, so a pod bound to
two nodes is caught even if it was deleted later. A dropped watch is resumed from the last
resourceVersion; a 410 is answered by a re-list diffed against what it knew (``nodeName`` can
never be unset, so a diff still reveals a second node).

:class:`WatchMonkey` periodically compacts the server's history and drops every open watch, so
informers see cut connections and, when they were behind the compaction, 410 and a re-list.

Each runs on its own thread; ``start``/``stop`` are called from the driver's thread.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Self

from kdispatch import GoneError
from kdispatch.testing import InMemoryApiServer
from kdispatch.testing.memory import Watch


class _ServerThread:
    """One daemon thread running ``_run`` against ``server`` until ``stop``."""

    def __init__(self, server: InMemoryApiServer, thread_name: str) -> None:
        self._server = server
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def start(self) -> Self:
        """Driver thread."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Driver thread."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        raise NotImplementedError


class BindingAuditor(_ServerThread):
    """Records every node each pod (by UID) was ever bound to. Own thread."""

    def __init__(self, server: InMemoryApiServer) -> None:
        self._nodes: dict[str, set[str]] = defaultdict(set)
        self._lock = threading.Lock()
        self._rv = server.resource_version
        self._watch: Watch | None = server.watch("Pod", resource_version=self._rv)
        self.resumes = 0
        self.relists = 0
        super().__init__(server, "chaos-auditor")

    def stop(self, timeout: float = 5.0) -> None:
        """Driver thread: stop after taking what is queued (call once writes have ended)."""
        self.catch_up()
        self._stop.set()
        with self._lock:
            w = self._watch
        if w is not None:
            w.stop()
        super().stop(timeout)

    def catch_up(self) -> None:
        """Driver thread: make sure every change up to now has been seen (a re-list diff)."""
        items = self._server.list("Pod").items
        with self._lock:
            for obj in items:
                self._see(obj)

    def nodes(self) -> dict[str, set[str]]:
        """uid → every node the pod was seen bound to."""
        with self._lock:
            return {uid: set(nodes) for uid, nodes in self._nodes.items()}

    def _see(self, obj: dict[str, Any]) -> None:
        node = (obj.get("spec") or {}).get("nodeName")
        if node:
            self._nodes[obj["metadata"]["uid"]].add(node)

    def _run(self) -> None:
        """Auditor thread."""
        while not self._stop.is_set():
            with self._lock:
                w = self._watch
            if w is None:
                return
            event = w.next(timeout=0.2)
            if event is not None:
                with self._lock:
                    self._see(event.object)
                    self._rv = event.resource_version
                continue
            if not w.ended or self._stop.is_set():
                continue
            self._resume()

    def _resume(self) -> None:
        """Auditor thread: re-open a dropped watch, re-listing after a 410 (again if the
        history was compacted between the list and the watch)."""
        while True:
            try:
                w = self._server.watch("Pod", resource_version=self._rv)
                break
            except GoneError:
                items, rv, _ = self._server.list("Pod")
                with self._lock:
                    for obj in items:
                        self._see(obj)
                self.relists += 1
                self._rv = rv
        self.resumes += 1
        with self._lock:
            self._watch = w


class WatchMonkey(_ServerThread):
    """Every ``interval`` seconds: compact the history and drop every watch. Own thread."""

    def __init__(self, server: InMemoryApiServer, interval: float) -> None:
        self._interval = interval
        self.drops = 0
        self.compactions = 0
        super().__init__(server, "chaos-watch-monkey")

    def _run(self) -> None:
        """Monkey thread."""
        while not self._stop.wait(self._interval):
            self._server.compact()
            self.compactions += 1
            self.drops += self._server.drop_watches()
