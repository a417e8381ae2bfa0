"""Shorthands of the in-memory apiserver's own tests (``tests/integration/test_memory*.py``);
their fixtures ``pod`` and ``pod_watch`` are in ``tests/conftest.py``."""

from __future__ import annotations

from typing import Any

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
