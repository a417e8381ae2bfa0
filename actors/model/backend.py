"""The ``ApiBackend`` protocol: the only way kdispatch talks to an apiserver (implemented by
``KubernetesBackend`` and the in-memory apiserver), and the request rules backends share.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Protocol, runtime_checkable

from .errors import InvalidRequestError, KdispatchError
from .kinds import PatchType
from .objects import Obj, ObjectRef, resource_version

__all__ = ["ApiBackend", "EvictionBackend", "PatchType", "missing_methods"]


@runtime_checkable
class ApiBackend(Protocol):
    """What the dispatcher needs from an apiserver. Every method runs on an executor worker
    thread (several at once), may block for one request (bounded by the backend's request
    timeout), and reports failures only by raising :class:`~kdispatch.ApiError` subclasses.
    Objects go in and come out as JSON dicts."""

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        """Read one object (a fresh copy from the server, not a cache)."""
        ...

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
        """Patch the ``status`` subresource and return the updated object. ``patch`` is the
        object-shaped body (``{"status": {...}}``; only ``status``). ``uid`` and (when not None)
        ``resource_version`` are preconditions: a mismatch raises ``ConflictError``
        (``NotFoundError`` if the object is gone). ``strategic`` merges ``status.conditions``
        by ``type``; ``merge`` is RFC 7386 (lists replaced whole)."""
        ...

    def bind(self, namespace: str, name: str, *, uid: str, node: str) -> None:
        """Create a ``pods/binding`` to ``node``. A pod that is already bound (to any node)
        raises ``ConflictError``; a UID mismatch raises ``ConflictError``."""
        ...

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str,
        grace_period_seconds: int | None = None,
    ) -> None:
        """Delete with a UID precondition (mismatch raises ``ConflictError``)."""
        ...


@runtime_checkable
class EvictionBackend(Protocol):
    """A backend that can create ``pods/eviction`` (policy/v1), which honours
    PodDisruptionBudgets. Thread-safe; runs on executor workers."""

    def evict(
        self,
        namespace: str,
        name: str,
        *,
        uid: str,
        grace_period_seconds: int | None = None,
    ) -> None:
        """Evict the pod (its ``deleteOptions`` carry a UID precondition: a mismatch raises
        ``ConflictError``). A PodDisruptionBudget that allows no disruption now raises
        :class:`~kdispatch.DisruptionBudgetError`; a missing pod
        ``NotFoundError``."""
        ...


@cache
def _methods(protocol: type) -> tuple[str, ...]:
    """The public methods a protocol class declares."""
    return tuple(n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_"))


def missing_methods(obj: object, protocol: type) -> list[str]:
    """The methods of ``protocol`` (a backend protocol of this module, or ``EventSink``) that
    ``obj`` lacks, looked up as a call looks them up: [] when it has them all. Unlike
    ``isinstance`` against the protocol, which from Python 3.12 on ignores ``__getattr__``,
    this finds what a wrapper delegates, the charged backend a call's ``send`` is given among
    them. Any thread."""
    return [name for name in _methods(protocol) if not callable(getattr(obj, name, None))]


def patch_status_guarded(
    backend: ApiBackend,
    ref: ObjectRef,
    status: dict[str, Any] | None,
    basis: Obj | None,
    patch_type: PatchType,
) -> Obj | None:
    """Patch ``{"status": status}`` onto ``ref``, guarded by its UID and the resourceVersion of
    ``basis`` (the object the patch was computed on); the server's object, or ``basis`` with no
    request when ``status`` is None. Executor worker thread."""
    if status is None:
        return basis
    return backend.patch_status(
        ref.kind,
        ref.namespace,
        ref.name,
        {"status": status},
        uid=ref.uid,
        resource_version=resource_version(basis),
        patch_type=patch_type,
    )


def check_grace_period(
    grace_period_seconds: object, error: type[KdispatchError] = InvalidRequestError
) -> int | None:
    """The one rule for a deletion's ``grace_period_seconds``: None or an int >= 0, else
    ``error`` (a backend raises :class:`~kdispatch.InvalidRequestError`, a call
    type checking its own fields :class:`~kdispatch.InvalidCallError`); the value,
    narrowed. Calling thread."""
    if grace_period_seconds is not None and (
        isinstance(grace_period_seconds, bool)
        or not isinstance(grace_period_seconds, int)
        or grace_period_seconds < 0
    ):
        raise error(
            f"grace_period_seconds must be an int >= 0 or None, got {grace_period_seconds!r}"
        )
    return grace_period_seconds


def check_page_limit(limit: object) -> None:
    """The rule every backend applies to a list's page ``limit``: None or an int >= 1, else
    :class:`~kdispatch.InvalidRequestError`. Calling thread."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidRequestError(f"limit must be a positive int, got {limit!r}")
