"""``KubernetesBackend``: the :class:`~kdispatch.ApiBackend` over the official client, for any
kind of the kind table, built-in or CRD (the "Any kind and CRDs" guide, ``docs/kinds.md``).

Requests go through one shared :class:`kubernetes.client.ApiClient` with a transport of
:mod:`kdispatch.adapters.transport` (which also turns failures into errors);
:mod:`kdispatch.adapters.rest` builds them and checks the replies. Every request carries a
client-side timeout.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from kubernetes import client as k8s
from loguru import logger

from kdispatch.actors.model.errors import InvalidConfigError
from kdispatch.actors.model.kinds import DEFAULT_KINDS, KindTable, PatchType

from . import rest
from .kubeconfig import in_cluster_configuration, kubeconfig_configuration, url_configuration
from .listing import ObjectList
from .rest import AnyPatchType, ref
from .transport import (
    TransportName,
    check_workers,
    decode_object,
    make_transport,
    positive_seconds,
    prepare_configuration,
    size_pool,
)

__all__ = ["KubernetesBackend", "prepare_configuration"]


class KubernetesBackend:
    """:class:`~kdispatch.ApiBackend` over the official ``kubernetes`` client. Thread-safe:
    any number of executor worker threads may call it at once, sharing one ``ApiClient`` and
    its pool. Each method blocks for at most one request (``list_all``: one per page).
    ``request_timeout`` bounds each request as a whole: connecting, waiting for the reply and
    reading its body, however slowly the server sends it. Within it, urllib3 reads the reply's
    status line and headers, and there it bounds each wait for data instead. A watch's events
    come as they come (:meth:`watch`)."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        request_timeout: float = 10.0,
        owns_client: bool = False,
        transport: TransportName = "lean",
        workers: int | None = None,
        kinds: KindTable | None = None,
    ) -> None:
        """Wrap ``api_client`` (its configuration is used as is; either transport sends
        without urllib3's own retries). ``owns_client``: close it in :meth:`close`.
        ``transport``: ``"lean"`` or ``"client"``. ``workers``: size the pool
        for that many threads now (see :meth:`size_pool`). ``kinds``: the kind table (default:
        the process-wide one). Runs on the caller's thread; raises ``InvalidConfigError``."""
        if not isinstance(api_client, k8s.ApiClient):
            raise InvalidConfigError(
                f"api_client must be a kubernetes ApiClient, got {api_client!r}"
            )
        if kinds is not None and not isinstance(kinds, KindTable):
            raise InvalidConfigError(f"kinds must be a KindTable, got {kinds!r}")
        self._api_client = api_client
        self._timeout = positive_seconds(request_timeout)
        self._transport = make_transport(api_client, transport)
        self._owns_client = owns_client
        self._kinds = kinds if kinds is not None else DEFAULT_KINDS
        if workers is not None:
            self.size_pool(workers)

    # ----------------------------------------------------------------- constructors

    @classmethod
    def for_url(
        cls,
        url: str,
        *,
        workers: int = 8,
        request_timeout: float = 10.0,
        token: str | None = None,
        ca_cert: str | None = None,
        transport: TransportName = "lean",
        kinds: KindTable | None = None,
    ) -> KubernetesBackend:
        """A backend for an apiserver at ``url`` (tests, or a proxy such as ``kubectl proxy``).
        ``token``: a bearer token; ``ca_cert``: a CA bundle file for https. TLS verification
        stays on. Caller's thread."""
        configure = partial(url_configuration, url, token, ca_cert)
        return cls._owning(configure, workers, request_timeout, transport, kinds)

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | None = None,
        context: str | None = None,
        *,
        workers: int = 8,
        request_timeout: float = 10.0,
        transport: TransportName = "lean",
        kinds: KindTable | None = None,
    ) -> KubernetesBackend:
        """A backend from a kubeconfig file (default: ``$KUBECONFIG``, else ``~/.kube/config``)
        and context (default: its current context); the file is never written back. A file
        that is missing, unreadable or broken, an unknown context, or one that names a cluster
        or user the file lacks raises :class:`~kdispatch.InvalidConfigError` naming the file
        and the context (the original error is its ``__cause__``). Caller's thread."""
        configure = partial(kubeconfig_configuration, path, context)
        return cls._owning(configure, workers, request_timeout, transport, kinds)

    @classmethod
    def in_cluster(
        cls,
        *,
        workers: int = 8,
        request_timeout: float = 10.0,
        transport: TransportName = "lean",
        kinds: KindTable | None = None,
    ) -> KubernetesBackend:
        """A backend from the pod's service account (token and CA mounted by the kubelet).
        Runs on the caller's thread."""
        return cls._owning(in_cluster_configuration, workers, request_timeout, transport, kinds)

    @classmethod
    def _owning(
        cls,
        configure: Callable[[], k8s.Configuration],
        workers: int,
        request_timeout: float,
        transport: TransportName,
        kinds: KindTable | None,
    ) -> KubernetesBackend:
        """Check the settings, then a backend owning a new ``ApiClient`` on ``configure()``,
        its pool sized for ``workers``."""
        check_workers(workers)
        positive_seconds(request_timeout)
        return cls(
            k8s.ApiClient(prepare_configuration(configure(), workers)),
            request_timeout=request_timeout,
            owns_client=True,
            transport=transport,
            kinds=kinds,
        )

    # ----------------------------------------------------------------- properties / lifecycle

    @property
    def api_client(self) -> k8s.ApiClient:
        """The shared client (for informers built on the same connection settings)."""
        return self._api_client

    @property
    def request_timeout(self) -> float:
        """The client-side timeout of each request as a whole, in seconds (see the class)."""
        return self._timeout

    @property
    def transport(self) -> str:
        """``"lean"`` or ``"client"``."""
        return self._transport.name

    @property
    def kinds(self) -> KindTable:
        """The kind table requests are resolved with."""
        return self._kinds

    def size_pool(self, workers: int) -> None:
        """Keep at least ``workers`` pooled connections per host (never shrinks). The
        dispatcher calls this with ``ExecutorConfig.workers``. Caller's thread, at setup."""
        size_pool(self._api_client, workers)

    def close(self) -> None:
        """Close the client's connection pool if this backend created it. Any thread."""
        if self._owns_client:
            client: Any = self._api_client
            client.close()

    def __enter__(self) -> KubernetesBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        host = getattr(self._api_client.configuration, "host", "?")
        return (
            f"KubernetesBackend(host={host!r}, transport={self.transport!r}, "
            f"request_timeout={self._timeout})"
        )

    # ----------------------------------------------------------------- generic requests

    def get_path(self, path: str) -> bytes:
        """GET any API path (e.g. a discovery document such as ``/apis``) and return the raw
        body of the 2xx reply. Calling thread."""
        what = f"get {rest.api_path(path)}"
        return self._transport.request("GET", path, what=what, timeout=self._timeout).data

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """GET one object as a JSON dict. Executor worker thread."""
        info = rest.target(self._kinds, kind, namespace, name)
        what = f"get {kind} {ref(namespace, name)}"
        path = info.path(namespace, name)
        reply = self._transport.request("GET", path, what=what, timeout=self._timeout)
        return rest.typed_object(reply.data, info, what)

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> ObjectList:
        """One page of objects of ``kind`` (in ``namespace``, or every namespace when None):
        an :class:`ObjectList` (``items``, ``resource_version`` to watch from,
        ``continue_token``: None on the last page). ``limit``/``continue_token`` page through a
        large collection; :meth:`list_all` follows the pages. Calling thread."""
        info = self._kinds.lookup(kind)
        path = rest.collection(info, namespace)
        query = rest.selectors(label_selector, field_selector)
        query = rest.list_query(query, limit, continue_token, resource_version)
        what = f"list {kind}"
        reply = self._transport.request("GET", path, what=what, timeout=self._timeout, query=query)
        return rest.object_list(reply.data, info, what)

    def list_all(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """Every object of ``kind``, following ``continue`` tokens page by page, and the
        resourceVersion of the list (to watch from): the first page's, as client-go's pager
        takes it. kube-apiserver serves every page from that snapshot; a server whose later
        pages see newer objects still loses no change to a watch from there (it replays what
        changed while the pages were read). Calling thread."""
        items: builtins.list[dict[str, Any]] = []
        token: str | None = None
        resource_version: str | None = None
        while True:
            page = self.list(
                kind,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_token=token,
            )
            items.extend(page.items)
            if resource_version is None:
                resource_version = page.resource_version
            if not page.continue_token:
                return items, resource_version
            token = page.continue_token

    def watch(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
        field_selector: str | None = None,
        bookmarks: bool = True,
    ) -> Any:
        """Open a watch: the raw urllib3 response streaming JSON lines (see
        :class:`~kdispatch.ClientListWatch`, which decodes it). The reply's head comes within
        the request timeout (kube-apiserver sends it as the watch starts); then each wait for
        an event is bounded by ``timeout_seconds`` plus the request timeout. Calling thread."""
        info = self._kinds.lookup(kind)
        path = rest.collection(info, namespace)
        query = rest.watch_query(
            timeout_seconds, label_selector, field_selector, resource_version, bookmarks
        )
        return self._transport.stream(
            path,
            what=f"watch {kind}",
            timeout=self._timeout,
            idle=max(1, timeout_seconds) + self._timeout,
            query=query,
        )

    def create(self, kind: str, namespace: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """POST a new object; returns what the server stored. Executor worker thread."""
        info, name, body = rest.create_body(self._kinds, kind, namespace, obj)
        what = f"create {kind} {ref(namespace, name)}"
        path = rest.collection(info, namespace)
        reply = self._transport.request("POST", path, what=what, timeout=self._timeout, body=body)
        return rest.typed_object(reply.data, info, what)

    def patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        subresource: str | None = None,
        patch_type: AnyPatchType | None = None,
    ) -> dict[str, Any]:
        """PATCH the object (or ``subresource``, e.g. ``"status"``) and return the result.

        ``patch_type``: ``"strategic"`` (built-ins only), ``"merge"`` (RFC 7386) or ``"json"``
        (RFC 6902, ``patch`` is a list of operations); None picks the kind's flavour. ``uid``
        and ``resource_version`` are preconditions: in the body's ``metadata`` for merge
        patches (a mismatch raises ``ConflictError``: the server answers 409 for the
        resourceVersion, 422 "field is immutable" for the UID), as leading ``test`` operations
        for a JSON patch (a mismatch is the server's bare 422, ``InvalidRequestError``).
        Executor worker thread."""
        info = rest.target(self._kinds, kind, namespace, name)
        body, content_type = rest.patch_body(
            info,
            patch,
            uid=uid,
            resource_version=resource_version,
            subresource=subresource,
            patch_type=patch_type,
        )
        suffix = f"/{subresource}" if subresource else ""
        what = f"patch {kind} {ref(namespace, name)}{suffix}"
        reply = self._transport.request(
            "PATCH",
            info.path(namespace, name, subresource),
            what=what,
            timeout=self._timeout,
            body=body,
            content_type=content_type,
        )
        return rest.typed_object(reply.data, info, what)

    def create_subresource(
        self,
        kind: str,
        namespace: str,
        name: str,
        subresource: str,
        body: Mapping[str, Any],
    ) -> tuple[int, dict[str, Any]]:
        """POST ``body`` to a subresource (``binding``, ``eviction``); returns the HTTP status
        and the decoded reply. Executor worker thread."""
        info = rest.target(self._kinds, kind, namespace, name)
        rest.check_subresource(subresource)
        what = f"create {kind} {ref(namespace, name)}/{subresource}"
        path = info.path(namespace, name, subresource)
        reply = self._transport.request(
            "POST", path, what=what, timeout=self._timeout, body=dict(body)
        )
        return reply.status, decode_object(reply.data, what)

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str,
        grace_period_seconds: int | None = None,
        resource_version: str | None = None,
        propagation_policy: str | None = None,
    ) -> None:
        """DELETE with preconditions (``DeleteOptions.preconditions``: ``uid``, and
        ``resource_version`` when given) and an optional grace period. 404 raises
        :class:`NotFoundError`. Executor worker thread."""
        info = rest.target(self._kinds, kind, namespace, name)
        body = rest.delete_options(uid, resource_version, grace_period_seconds, propagation_policy)
        what = f"delete {kind} {ref(namespace, name)}"
        path = info.path(namespace, name)
        self._transport.request("DELETE", path, what=what, timeout=self._timeout, body=body)

    # ----------------------------------------------------------------- the dispatcher's calls

    def patch_status(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        *,
        uid: str,
        resource_version: str | None,
        patch_type: PatchType | None = None,
    ) -> dict[str, Any]:
        """PATCH the ``status`` subresource with UID / resourceVersion preconditions carried in
        the body's metadata (None: the kind's patch flavour). Returns the updated object.
        Executor worker thread."""
        rest.check_status_patch_type(patch_type)
        rest.text("uid", uid)
        return self.patch(
            kind,
            namespace,
            name,
            patch,
            uid=uid,
            resource_version=resource_version,
            subresource="status",
            patch_type=patch_type,
        )

    def bind(self, namespace: str, name: str, *, uid: str, node: str) -> None:
        """POST ``pods/binding`` (UID precondition in the Binding's metadata) and check that the
        server answered 200/201 with a success ``Status`` (or the Binding). Executor worker
        thread."""
        body = rest.binding(namespace, name, uid, node)
        code, reply = self.create_subresource("Pod", namespace, name, "binding", body)
        rest.check_created(code, reply, "Binding", f"bind {ref(namespace, name)} to {node}")
        logger.bind(pod=ref(namespace, name), uid=uid, node=node).debug("bound")

    def evict(
        self,
        namespace: str,
        name: str,
        *,
        uid: str,
        grace_period_seconds: int | None = None,
    ) -> None:
        """POST a ``policy/v1`` ``Eviction`` to ``pods/eviction`` with a UID precondition in its
        ``deleteOptions``. A PodDisruptionBudget that forbids it raises
        :class:`~kdispatch.DisruptionBudgetError` (a retryable 429). Executor
        worker thread."""
        body = rest.eviction(namespace, name, uid, grace_period_seconds)
        code, reply = self.create_subresource("Pod", namespace, name, "eviction", body)
        rest.check_created(code, reply, "Eviction", f"evict {ref(namespace, name)}")
        logger.bind(pod=ref(namespace, name), uid=uid).debug("evicted")
