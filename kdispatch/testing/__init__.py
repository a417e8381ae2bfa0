"""Everything that stands in for a cluster, for tests, examples and the main job's embedded mode.

``from kdispatch.testing import InMemoryApiServer, ApiServerHTTP, make_pod``:

* :class:`InMemoryApiServer`: an embedded apiserver with the real one's preconditions (UID and
  resourceVersion → 409, double binding → 409, NotFound → 404, 429 with Retry-After, watches
  with 410 Gone), fault injection (:meth:`InMemoryApiServer.script`, :class:`FaultPlan`,
  :class:`Latency`; the names in :data:`FAULTS` and :data:`OPS`) and a request log
  (:class:`RequestRecord`) in the order it applied requests. It is also an
  :class:`~kdispatch.ApiBackend`, so a :class:`~kdispatch.Dispatcher` can use it directly.
* :class:`ApiServerHTTP`: the same server over HTTP on 127.0.0.1, for the official client.
* :class:`MemoryListWatch` and :class:`MemoryLeaseClient`: informers and leader election over
  the in-memory server without HTTP.
* :func:`make_pod`, :func:`make_podgroup`, :func:`make_condition`, :func:`make_node`,
  :func:`make_claim`, :func:`make_pdb`: object factories (the one home for test objects).
* :mod:`kdispatch.testing.waiting`: ``wait_for``/``poll``/``until``, the one wait for observable
  state (a predicate polled with a deadline that names what it waited for).
* :func:`live_pooled_actors`: object actors alive in this process, for leak checks.
* :mod:`kdispatch.testing.envtest`: the real etcd + kube-apiserver, built from the Go module
  proxy and started for your own tests (``python -m kdispatch.testing.envtest``).

The library itself never imports this package; an import-linter contract holds that.
"""

from typing import TYPE_CHECKING

from kdispatch._lazy import lazy_exports

from .audit import RequestRecord, request_writer
from .lease_client import MemoryLeaseClient
from .memory import InMemoryApiServer
from .memory_faults import DEFAULT_FAULT_WEIGHTS, FAULTS, OPS, FaultPlan, Latency
from .memory_objects import (
    make_claim,
    make_condition,
    make_node,
    make_pdb,
    make_pod,
    make_podgroup,
)

if TYPE_CHECKING:
    from kdispatch.actors.engine.registry import live_pooled_actors

    from .httpserver import ApiServerHTTP
    from .listwatch import MemoryListWatch
else:  # on first use: pytest imports this package for the envtest plugin in every run, and
    # these need the actor runtime, http.server and (the informer) the Kubernetes client
    __getattr__ = lazy_exports(
        __name__,
        {
            "kdispatch.actors.engine.registry": ("live_pooled_actors",),
            ".httpserver": ("ApiServerHTTP",),
            ".listwatch": ("MemoryListWatch",),
        },
    )

__all__ = [
    "DEFAULT_FAULT_WEIGHTS",
    "FAULTS",
    "OPS",
    "ApiServerHTTP",
    "FaultPlan",
    "InMemoryApiServer",
    "Latency",
    "MemoryLeaseClient",
    "MemoryListWatch",
    "RequestRecord",
    "live_pooled_actors",
    "make_claim",
    "make_condition",
    "make_node",
    "make_pdb",
    "make_pod",
    "make_podgroup",
    "request_writer",
]
