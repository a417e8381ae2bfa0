"""The client-side rate limiter of ``--pre-kep``: one token bucket every request waits for.

client-go gives a clientset one limiter (``rest.Config.QPS``/``Burst``) that every request of
every goroutine waits on before it is sent; kube-scheduler before KEP-5229 sent its status
patches, bindings, preemptions and Events through it. :class:`ClientLimiter` is that limiter
(over kdispatch's :class:`~kdispatch.TokenBucket`), and :class:`ThrottledBackend` is a backend
whose every request waits for it, on the calling thread, in arrival order.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from typing import Any

from kdispatch import ApiBackend, Obj, TokenBucket


class ClientLimiter:
    """``qps`` requests per second (``0``: unlimited), ``burst`` at once. Thread-safe."""

    def __init__(self, qps: float, burst: int) -> None:
        self._bucket = TokenBucket(qps if qps > 0 else math.inf, burst)
        self._turn = threading.Lock()  # waiters take their tokens one after the other
        self.waited = 0.0
        """Seconds requests spent waiting for a token, in total."""

    def wait(self) -> None:
        """Calling thread: block until a token is taken (client-go's ``limiter.Wait``)."""
        with self._turn:
            while (delay := self._bucket.try_take()) > 0:
                self.waited += delay
                time.sleep(delay)

    @property
    def taken(self) -> int:
        """Tokens taken so far (one per request sent)."""
        with self._turn:
            return self._bucket.taken


class ThrottledBackend:
    """An :class:`~kdispatch.ApiBackend` (and Event sink) whose every request first waits for
    the shared :class:`ClientLimiter`. Request methods run on the calling thread."""

    def __init__(self, backend: ApiBackend, limiter: ClientLimiter) -> None:
        self._backend: Any = backend
        self.limiter = limiter

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        """Read one object."""
        self.limiter.wait()
        obj: Obj = self._backend.get(kind, namespace, name)
        return obj

    def patch_status(self, *args: Any, **kwargs: Any) -> Obj:
        """Patch the status subresource."""
        self.limiter.wait()
        obj: Obj = self._backend.patch_status(*args, **kwargs)
        return obj

    def bind(self, namespace: str, name: str, *, uid: str, node: str) -> None:
        """Create a binding."""
        self.limiter.wait()
        self._backend.bind(namespace, name, uid=uid, node=node)

    def delete(self, *args: Any, **kwargs: Any) -> None:
        """Delete an object."""
        self.limiter.wait()
        self._backend.delete(*args, **kwargs)

    def evict(self, *args: Any, **kwargs: Any) -> None:
        """Create an eviction."""
        self.limiter.wait()
        self._backend.evict(*args, **kwargs)

    def create(self, kind: str, namespace: str, obj: Mapping[str, Any]) -> Obj:
        """Create an object (an Event)."""
        self.limiter.wait()
        out: Obj = self._backend.create(kind, namespace, obj)
        return out

    def patch(self, *args: Any, **kwargs: Any) -> Obj:
        """Patch an object (an Event's series)."""
        self.limiter.wait()
        out: Obj = self._backend.patch(*args, **kwargs)
        return out
