"""Test backends wrapping another backend: gate requests and wait for them."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

from kdispatch.actors.backend import ApiBackend, PatchType
from kdispatch.actors.errors import ApiError, NotFoundError
from kdispatch.actors.objects import Obj
from kdispatch.testing.memory import InMemoryApiServer


class GatedBackend:
    """Forwards to another backend (an :class:`InMemoryApiServer` by default). Every request is
    recorded and first waits for ``gate`` (set by default) — only the requests for the object
    named ``hold`` when one is given — so tests can hold requests in flight and wait for N of
    them. Request methods run on executor worker threads."""

    def __init__(self, inner: ApiBackend | None = None, *, hold: str | None = None) -> None:
        self.inner: Any = inner if inner is not None else InMemoryApiServer()
        self.hold = hold
        self.gate = threading.Event()
        if hold is None:
            self.gate.set()
        self.calls: list[tuple[str, str]] = []
        self._cond = threading.Condition()

    def _enter(self, op: str, name: str) -> None:
        with self._cond:
            self.calls.append((op, name))
            self._cond.notify_all()
        if (self.hold is None or name == self.hold) and not self.gate.wait(timeout=30):
            raise RuntimeError("gate never opened")

    def wait_calls(self, n: int, timeout: float = 10.0) -> list[tuple[str, str]]:
        """Block until at least ``n`` requests arrived; returns them."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.calls) >= n, timeout=timeout):
                raise AssertionError(
                    f"only {len(self.calls)} of {n} requests arrived: {self.calls}"
                )
            return list(self.calls)

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        self._enter("get", name)
        obj: Obj = self.inner.get(kind, namespace, name)
        return obj

    def patch_status(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        *,
        uid: str,
        resource_version: str | None,
        patch_type: PatchType = "strategic",
    ) -> Obj:
        self._enter("patch_status", name)
        obj: Obj = self.inner.patch_status(
            kind,
            namespace,
            name,
            patch,
            uid=uid,
            resource_version=resource_version,
            patch_type=patch_type,
        )
        return obj

    def bind(self, namespace: str, name: str, *, uid: str, node: str) -> None:
        self._enter("bind", name)
        self.inner.bind(namespace, name, uid=uid, node=node)

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str,
        grace_period_seconds: int | None = None,
    ) -> None:
        self._enter("delete", name)
        self.inner.delete(kind, namespace, name, uid=uid, grace_period_seconds=grace_period_seconds)

    def evict(
        self, namespace: str, name: str, *, uid: str, grace_period_seconds: int | None = None
    ) -> None:
        self._enter("evict", name)
        self.inner.evict(namespace, name, uid=uid, grace_period_seconds=grace_period_seconds)


class RecordingBackend(ApiBackend):
    """Keeps one object, records every request, and answers with scripted errors or by applying
    status patches with ``apply_patch`` (object, object-shaped patch) -> new object. Runs on the
    test's thread (the calls' ``send`` is called directly)."""

    def __init__(
        self,
        obj: Obj | None = None,
        *,
        errors: dict[str, list[ApiError]] | None = None,
        apply_patch: Callable[[Obj, dict[str, Any]], Obj],
    ) -> None:
        self.obj: Obj | None = copy.deepcopy(obj)
        self.errors = errors or {}
        self.apply_patch = apply_patch
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def _maybe_fail(self, op: str) -> None:
        queue = self.errors.get(op)
        if queue:
            raise queue.pop(0)

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        self.requests.append(("get", {"kind": kind, "namespace": namespace, "name": name}))
        self._maybe_fail("get")
        if self.obj is None:
            raise NotFoundError()
        return copy.deepcopy(self.obj)

    def patch_status(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        *,
        uid: str,
        resource_version: str | None,
        patch_type: PatchType = "strategic",
    ) -> Obj:
        self.requests.append(
            (
                "patch_status",
                {
                    "kind": kind,
                    "namespace": namespace,
                    "name": name,
                    "patch": copy.deepcopy(patch),
                    "uid": uid,
                    "resource_version": resource_version,
                    "patch_type": patch_type,
                },
            )
        )
        self._maybe_fail("patch_status")
        assert self.obj is not None
        assert set(patch) == {"status"}, "object-shaped body holding only status"
        self.obj = self.apply_patch(self.obj, patch)
        return copy.deepcopy(self.obj)

    def bind(self, namespace: str, name: str, *, uid: str, node: str) -> None:
        self.requests.append(
            ("bind", {"namespace": namespace, "name": name, "uid": uid, "node": node})
        )
        self._maybe_fail("bind")

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str,
        grace_period_seconds: int | None = None,
    ) -> None:
        self.requests.append(
            (
                "delete",
                {"kind": kind, "namespace": namespace, "name": name, "uid": uid,
                 "grace_period_seconds": grace_period_seconds},
            )
        )  # fmt: skip
        self._maybe_fail("delete")

    def ops(self) -> list[str]:
        return [op for op, _ in self.requests]
