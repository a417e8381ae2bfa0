"""What the in-memory apiserver records about each request: :class:`RequestRecord`, and who
sent the request a thread is serving (:data:`request_writer`, set by front ends such as
:mod:`kdispatch.testing.httpserver` and by :class:`~kdispatch.testing.MemoryLeaseClient`).

Its own module so that the server (:mod:`kdispatch.testing.memory`) and its lease store
(:mod:`kdispatch.testing.memory_leases`) both read it without importing each other.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["RequestRecord", "request_writer"]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One ``ApiBackend`` request as the server saw it. ``outcome`` is ``"ok"``, the injected
    fault's name (``"429"``, ``"timeout"``, ``"apply_then_fail"`` ...) or the reason of the error
    the server answered (``"NotFound"``, ``"Conflict"``, ``"Invalid"``). ``uid`` is the request's
    UID precondition (``""`` for ``get``); ``t`` is ``time.monotonic()`` when it was answered.
    ``writer``: who sent it (:data:`request_writer` while it was served, e.g. the HTTP
    ``User-Agent``; ``""`` when unknown). The log is in the order the server applied requests."""

    op: str
    kind: str
    namespace: str
    name: str
    uid: str
    outcome: str
    t: float
    writer: str = ""


request_writer: ContextVar[str] = ContextVar("request_writer", default="")
"""The identity of the client whose request the current thread serves (set by front ends such
as :class:`~kdispatch.testing.ApiServerHTTP`); recorded in :attr:`RequestRecord.writer`."""
