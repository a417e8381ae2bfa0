"""Test backends. :class:`WrappedBackend` is the one wrapper: it forwards every request to an
inner backend through one hook, :meth:`WrappedBackend.around`, which tests override to gate,
record, fail or delay requests. :class:`GatedBackend` holds requests and waits for them;
:class:`RecordingBackend` keeps one object and records every request. :func:`nominate` is the
tests' one spelling of a pod status change."""

from __future__ import annotations

import copy
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kdispatch.actors.model.backend import ApiBackend, EvictionBackend
from kdispatch.actors.model.errors import ApiError, NotFoundError
from kdispatch.actors.model.event_calls import EventSink
from kdispatch.actors.model.objects import Obj
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.memory import InMemoryApiServer

T = TypeVar("T")

_PROTOCOLS: dict[str, Any] = {"evict": EvictionBackend, "create": EventSink, "patch": EventSink}
_SIGNATURES = {
    op: inspect.signature(getattr(_PROTOCOLS.get(op, ApiBackend), op))
    for op in ("get", "patch_status", "bind", "delete", "evict", "create", "patch")
}


def request_fields(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of one backend request by their names in the :class:`ApiBackend` protocol
    (defaults filled in), e.g. ``{"namespace": ..., "name": ..., "uid": ..., "node": ...}``; a
    ``create`` (of an Event) is named by its object's ``metadata.name``."""
    bound = _SIGNATURES[op].bind(None, *args, **kwargs)
    bound.apply_defaults()
    fields = dict(bound.arguments)
    del fields["self"]
    if op == "create":  # the object's name, as every other request names it
        fields["name"] = fields["obj"]["metadata"]["name"]
    return fields


def nominate(
    api: ApiBackend,
    name: str,
    node: str,
    *,
    uid: str,
    resource_version: str | None = None,
    namespace: str = "default",
) -> Obj | None:
    """Pod ``name``'s ``status.nominatedNodeName`` set to ``node`` through ``api``'s
    ``patch_status`` (guarded by ``uid``, and by ``resource_version`` when given): the status
    change the tests make to see an update. Returns what ``patch_status`` returns."""
    return api.patch_status(
        "Pod",
        namespace,
        name,
        {"status": {"nominatedNodeName": node}},
        uid=uid,
        resource_version=resource_version,
    )


class WrappedBackend:
    """Forwards each request to ``inner`` (called with the caller's arguments) through
    :meth:`around`. Request methods run on executor worker threads, or on the caller's thread
    when a test calls ``send`` directly."""

    def __init__(self, inner: Any) -> None:
        self.inner: Any = inner

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        """Runs request ``op`` (its arguments by name in ``request``); ``send()`` forwards it
        to ``inner`` and returns its answer."""
        return send()

    def _forward(self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        forward = getattr(self.inner, op)
        return self.around(op, request_fields(op, args, kwargs), lambda: forward(*args, **kwargs))

    def get(self, *args: Any, **kwargs: Any) -> Obj:
        obj: Obj = self._forward("get", args, kwargs)
        return obj

    def patch_status(self, *args: Any, **kwargs: Any) -> Obj:
        obj: Obj = self._forward("patch_status", args, kwargs)
        return obj

    def bind(self, *args: Any, **kwargs: Any) -> None:
        self._forward("bind", args, kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> None:
        self._forward("delete", args, kwargs)

    def evict(self, *args: Any, **kwargs: Any) -> None:
        self._forward("evict", args, kwargs)

    def create(self, *args: Any, **kwargs: Any) -> Obj:
        obj: Obj = self._forward("create", args, kwargs)
        return obj

    def patch(self, *args: Any, **kwargs: Any) -> Obj:
        obj: Obj = self._forward("patch", args, kwargs)
        return obj


class Unloadable(Exception):
    """An exception that pickles but does not unpickle: pickle calls the constructor back with
    the one message, and it takes two arguments."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what} {code}")


class RefusingBackend(WrappedBackend):
    """A :class:`~kdispatch.KubernetesBackend` for ``url`` whose bindings of pods named
    ``refuse...`` land, then raise :class:`Unloadable` (a reply lost in a way that does not
    cross a pipe). Importable, so ``functools.partial(RefusingBackend, url)`` is a
    ``ProcessDispatcher`` backend factory."""

    def __init__(self, url: str, workers: int = 4) -> None:
        super().__init__(KubernetesBackend.for_url(url, workers=workers))

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        answer = send()
        if op == "bind" and request["name"].startswith("refuse"):
            raise Unloadable("binding refused", 42)
        return answer

    def close(self) -> None:
        self.inner.close()


class GatedBackend(WrappedBackend):
    """Forwards to another backend (an :class:`InMemoryApiServer` by default). Every request is
    recorded and first waits for ``gate`` (set by default) — only the requests for the object
    named ``hold`` when one is given — so tests can hold requests in flight and wait for N of
    them. Request methods run on executor worker threads."""

    def __init__(self, inner: ApiBackend | None = None, *, hold: str | None = None) -> None:
        super().__init__(inner if inner is not None else InMemoryApiServer())
        self.hold = hold
        self.gate = threading.Event()
        if hold is None:
            self.gate.set()
        self.calls: list[tuple[str, str]] = []
        self._cond = threading.Condition()

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        name = request["name"]
        with self._cond:
            self.calls.append((op, name))
            self._cond.notify_all()
        if (self.hold is None or name == self.hold) and not self.gate.wait(timeout=30):
            raise RuntimeError("gate never opened")
        return send()

    def wait_calls(self, n: int, timeout: float = 10.0) -> list[tuple[str, str]]:
        """Block until at least ``n`` requests arrived; returns them."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.calls) >= n, timeout=timeout):
                raise AssertionError(
                    f"only {len(self.calls)} of {n} requests arrived: {self.calls}"
                )
            return list(self.calls)


class _OneObject:
    """The server behind :class:`RecordingBackend`: one object, status patches applied with
    ``apply_patch``."""

    def __init__(self, obj: Obj | None, apply_patch: Callable[[Obj, dict[str, Any]], Obj]):
        self.obj: Obj | None = copy.deepcopy(obj)
        self.apply_patch = apply_patch

    def get(self, *args: Any) -> Obj:
        if self.obj is None:
            raise NotFoundError()
        return copy.deepcopy(self.obj)

    def patch_status(self, kind: str, namespace: str, name: str, patch: Any, **kw: Any) -> Obj:
        assert self.obj is not None
        assert set(patch) == {"status"}, "object-shaped body holding only status"
        self.obj = self.apply_patch(self.obj, patch)
        return copy.deepcopy(self.obj)

    def bind(self, *args: Any, **kwargs: Any) -> None:
        pass

    def delete(self, *args: Any, **kwargs: Any) -> None:
        pass


class RecordingBackend(WrappedBackend):
    """Keeps one object, records every request (its arguments by name), and answers with
    scripted errors or by applying status patches with ``apply_patch`` (object, object-shaped
    patch) -> new object. Runs on the test's thread (the calls' ``send`` is called directly)."""

    def __init__(
        self,
        obj: Obj | None = None,
        *,
        errors: dict[str, list[ApiError]] | None = None,
        apply_patch: Callable[[Obj, dict[str, Any]], Obj],
    ) -> None:
        super().__init__(_OneObject(obj, apply_patch))
        self.errors = errors or {}
        self.requests: list[tuple[str, dict[str, Any]]] = []

    @property
    def obj(self) -> Obj | None:
        """The object as the backend holds it now."""
        obj: Obj | None = self.inner.obj
        return obj

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        self.requests.append((op, copy.deepcopy(request)))
        queue = self.errors.get(op)
        if queue:
            raise queue.pop(0)
        return send()

    def ops(self) -> list[str]:
        return [op for op, _ in self.requests]
