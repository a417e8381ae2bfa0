"""A :class:`~kdispatch.adapters.leader.LeaseClient` over the leases of an
:class:`~kdispatch.testing.InMemoryApiServer`, for leader election without a cluster."""

from __future__ import annotations

from typing import Any

from kdispatch.actors.model.errors import InvalidInputError, NotFoundError

from .audit import request_writer
from .memory import InMemoryApiServer

__all__ = ["MemoryLeaseClient"]

Json = dict[str, Any]


class MemoryLeaseClient:
    """Leases of an :class:`~kdispatch.testing.memory.InMemoryApiServer` (the embedded default);
    ``writer`` is recorded as the identity of every lease write."""

    def __init__(self, server: InMemoryApiServer, *, writer: str = "") -> None:
        if not isinstance(server, InMemoryApiServer):
            raise InvalidInputError(f"server must be an InMemoryApiServer, got {server!r}")
        self._leases = server.leases
        self._writer = writer

    def get(self, namespace: str, name: str, *, timeout: float) -> Json | None:
        try:
            return self._leases.get(namespace, name)
        except NotFoundError:
            return None

    def create(self, namespace: str, lease: Json, *, timeout: float) -> Json:
        token = request_writer.set(self._writer)
        try:
            return self._leases.create(namespace, lease)
        finally:
            request_writer.reset(token)

    def update(self, namespace: str, name: str, lease: Json, *, timeout: float) -> Json:
        token = request_writer.set(self._writer)
        try:
            return self._leases.update(namespace, name, lease)
        finally:
            request_writer.reset(token)
