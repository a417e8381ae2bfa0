"""Shorthands of the in-memory apiserver's own tests (``tests/integration/test_memory*.py``);
their fixtures ``pod`` and ``pod_watch`` are in ``tests/conftest.py``. And a store that refuses
or fails an informer's requests on demand, served by ``ApiServerHTTP(stores=...)``."""

from __future__ import annotations

from typing import Any

from kdispatch.actors.model.errors import ForbiddenError, ServerError
from kdispatch.testing import InMemoryApiServer
from kdispatch.testing.memory import Watch, WatchEvent


def uid(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


def rv(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"].get("conditions", [])}


def patch(
    server: InMemoryApiServer, obj: dict[str, Any], status: dict[str, Any], **kw: Any
) -> dict[str, Any]:
    meta = obj["metadata"]
    return dict(
        server.patch_status(
            obj["kind"],
            meta.get("namespace", ""),
            meta["name"],
            {"status": status},
            uid=kw.pop("uid", meta["uid"]),
            resource_version=kw.pop("resource_version", None),
            **kw,
        )
    )


def drain(w: Watch) -> list[WatchEvent]:
    """Every event already queued on ``w`` (non-blocking)."""
    out: list[WatchEvent] = []
    while (e := w.next(timeout=0)) is not None:
        out.append(e)
    return out


class SwitchableStore:
    """A store for ``ApiServerHTTP(server, stores={kind: store})``: ``server`` itself, except
    that its lists and watches are refused (403, as RBAC) while ``forbidden`` is set, and its
    next ``failing_watches`` watches fail with an internal error (500). Set from the test's
    thread, read by the server's."""

    def __init__(self, server: InMemoryApiServer) -> None:
        self.server = server
        self.forbidden = False
        self.failing_watches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server, name)

    def list(self, *args: Any, **kwargs: Any) -> Any:
        if self.forbidden:
            raise ForbiddenError('pods is forbidden: User "x" cannot list resource "pods"')
        return self.server.list(*args, **kwargs)

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        if self.forbidden:
            raise ForbiddenError('pods is forbidden: User "x" cannot watch resource "pods"')
        if self.failing_watches:
            self.failing_watches -= 1
            raise ServerError("etcdserver: mvcc: required revision has been compacted")
        return self.server.watch(*args, **kwargs)
