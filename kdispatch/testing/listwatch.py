"""A :class:`~kdispatch.adapters.informer.ListWatch` straight over an
:class:`~kdispatch.testing.InMemoryApiServer`, without HTTP: what informers read in tests and in
the main job's embedded mode."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from kdispatch.actors.model.errors import ApiConnectionError, InvalidInputError
from kdispatch.actors.model.kinds import DEFAULT_KINDS, KindInfo, KindTable
from kdispatch.adapters.informer import Obj, WatchEvent, WatchStream, with_type_meta
from kdispatch.adapters.rest import check_scope

from .memory import InMemoryApiServer

__all__ = ["MemoryListWatch"]


class MemoryListWatch:
    """:class:`ListWatch` directly over an :class:`InMemoryApiServer` (no HTTP), for any kind
    of the kind table. ``label_selector``: only objects whose labels match (equality-based and
    set-based selectors, as the apiserver parses them). A watch the server drops raises
    :class:`ApiConnectionError`, like a cut connection. Bad arguments (an unknown kind, a
    namespace for a cluster-scoped kind, a ``label_selector`` that is not a non-empty str, a
    ``kinds`` that is not a :class:`~kdispatch.KindTable`) raise
    :class:`~kdispatch.InvalidInputError` here."""

    def __init__(
        self,
        server: InMemoryApiServer,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        kinds: KindTable | None = None,
    ):
        if not isinstance(server, InMemoryApiServer):
            raise InvalidInputError(f"server must be an InMemoryApiServer, got {server!r}")
        if kinds is not None and not isinstance(kinds, KindTable):
            raise InvalidInputError(f"kinds must be a KindTable, got {kinds!r}")
        if label_selector is not None and (
            not isinstance(label_selector, str) or not label_selector
        ):
            raise InvalidInputError(
                f"label_selector must be a non-empty str or None, got {label_selector!r}"
            )
        self._info = (kinds or DEFAULT_KINDS).lookup(kind)
        self.kind = self._info.kind
        self._server = server
        self._namespace = check_scope(self._info, namespace)
        self._selector = label_selector

    def list(self) -> tuple[list[Obj], str]:
        """Informer thread."""
        items, rv, _ = self._server.list(
            self.kind, namespace=self._namespace, label_selector=self._selector
        )
        return [with_type_meta(item, self._info) for item in items], rv

    def watch(self, resource_version: str, timeout_seconds: float) -> WatchStream:
        """Informer thread."""
        w = self._server.watch(
            self.kind,
            resource_version=resource_version,
            namespace=self._namespace,
            label_selector=self._selector,
        )
        return _MemoryWatchStream(w, self._info, timeout_seconds)


class _MemoryWatchStream:
    def __init__(self, w: Any, info: KindInfo, timeout: float) -> None:
        self._w = w
        self._info = info
        self._timeout = timeout

    def __iter__(self) -> Iterator[WatchEvent]:
        deadline = time.monotonic() + self._timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            event = self._w.next(timeout=remaining)
            if event is None:
                if self._w.ended:
                    if self._w.dropped:
                        raise ApiConnectionError(
                            f"watch of {self._info.kind} dropped by the server"
                        )
                    return
                continue
            yield WatchEvent(event.type, with_type_meta(event.object, self._info))

    def stop(self) -> None:
        self._w.stop()
