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
from collections.abc import Callable
from typing import Any

from kdispatch import ApiBackend, TokenBucket


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


def _throttled(method: str) -> Callable[..., Any]:
    """The backend's ``method``, called once the shared limiter gave a token."""

    def request(self: ThrottledBackend, *args: Any, **kwargs: Any) -> Any:
        self.limiter.wait()
        return getattr(self._backend, method)(*args, **kwargs)

    request.__name__ = request.__qualname__ = method
    request.__doc__ = f"``{method}`` once a token of the shared limiter is taken."
    return request


class ThrottledBackend:
    """An :class:`~kdispatch.ApiBackend` (and Event sink: ``create``, ``patch``) whose every
    request first waits for the shared :class:`ClientLimiter`. Request methods run on the
    calling thread."""

    def __init__(self, backend: ApiBackend, limiter: ClientLimiter) -> None:
        self._backend = backend
        self.limiter = limiter

    get = _throttled("get")
    patch_status = _throttled("patch_status")
    bind = _throttled("bind")
    delete = _throttled("delete")
    evict = _throttled("evict")
    create = _throttled("create")
    patch = _throttled("patch")
