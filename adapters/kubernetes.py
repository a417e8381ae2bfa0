"""``KubernetesBackend``: the :class:`~kdispatch.ApiBackend` over the official
client, for any resource.

Any kind of the kind table (:mod:`kdispatch.actors.model.kinds`) — built-in or CRD, namespaced or
cluster-scoped — can be read (``get``), listed with label/field selectors and pagination
(``list``, ``list_all``), watched (``watch``), created (``create``), patched (``patch``: the
object or a subresource such as ``status``; strategic merge for built-ins, JSON merge patch for
CRDs, or a JSON patch whose preconditions become ``test`` operations), have a subresource
created (``create_subresource``: ``pods/binding``, ``pods/eviction``) and be deleted with
preconditions (``delete``). ``patch_status``, ``bind``, ``evict`` and ``delete`` are the
dispatcher's calls on top of these.

Requests go through one shared :class:`kubernetes.client.ApiClient` — its ``Configuration``
(auth, TLS, proxies, token refresh) and its thread-safe urllib3 pool — with one of two
transports (:mod:`kdispatch.adapters.transport`): ``"lean"`` (the default: prebuilt JSON
straight through the client's pool, raw JSON replies) or ``"client"`` (the official
``call_api``). The pool keeps at least ``workers`` connections (:meth:`size_pool`; the
:class:`~kdispatch.Dispatcher` calls it with its executor's worker count), so
parallel workers never see "Connection pool is full". Every request carries a client-side
timeout.

Upstream facts this module relies on:

* ``metadata.resourceVersion`` in a (strategic or JSON merge) patch body is a precondition
  (mismatch → 409 Conflict); ``metadata.uid`` in such a body is applied to the object, so a
  mismatch is 422 Invalid ``metadata.uid: field is immutable`` — both transports map it to
  :class:`~kdispatch.ConflictError`, the UID precondition failure it is (a UID
  precondition on a binding or a deletion is a plain 409 Conflict); a JSON patch carries both
  as ``test`` ops;
* a strategic merge patch merges ``status.conditions`` by ``type``; custom resources only
  accept JSON merge and JSON patches;
* ``pods/binding`` answers ``Status{code: 201}``; a pod that is already bound gets 409;
* ``pods/eviction`` takes a ``policy/v1`` ``Eviction`` whose ``deleteOptions`` carry the
  preconditions, and answers 429 "Cannot evict pod as it would violate the pod's disruption
  budget." when a PodDisruptionBudget allows no disruption;
* a 429 (and often a 503) carries ``Retry-After``;
* lists page with ``limit``/``continue``; the last page has no ``continue`` token.

Exception messages carry the operation, HTTP status, reason and the server's message, never
request headers: bearer tokens do not appear in them or in logs. Bad configuration (URL,
workers, timeout, transport) raises :class:`~kdispatch.InvalidConfigError`;
malformed request arguments raise ``InvalidRequestError`` (or ``UnknownKindError``) before
anything is sent.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from loguru import logger

from kdispatch.actors.model.backend import check_grace_period, check_page_limit
from kdispatch.actors.model.errors import (
    BadResponseError,
    InvalidConfigError,
    InvalidRequestError,
)
from kdispatch.actors.model.kinds import DEFAULT_KINDS, KindInfo, KindTable, PatchType
from kdispatch.actors.model.objects import is_dns_label, is_dns_subdomain

from .kubeconfig import load_kubeconfig
from .listing import ObjectList
from .transport import (
    TransportName,
    check_timeout,
    check_workers,
    decode_object,
    error_from_status,
    make_transport,
    map_api_exception,
    map_transport_error,
    no_urllib3_retries,
    prepare_configuration,
    read_json_object,
    size_pool,
    translate_errors,
)

__all__ = [
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "KubernetesBackend",
    "ObjectList",
    "error_from_status",
    "map_api_exception",
    "map_transport_error",
    "no_urllib3_retries",
    "prepare_configuration",
    "read_json_object",
    "translate_errors",
]

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

AnyPatchType = Literal["strategic", "merge", "json"]
_CONTENT_TYPES: Mapping[str, str] = {
    "strategic": STRATEGIC_MERGE_PATCH,
    "merge": MERGE_PATCH,
    "json": JSON_PATCH,
}
_SUBRESOURCE_NAMES = frozenset({"status", "scale", "binding", "eviction", "ephemeralcontainers"})


class KubernetesBackend:
    """:class:`~kdispatch.ApiBackend` over the official ``kubernetes`` client.

    Thread-safe: every method may be called from any number of executor worker threads at
    once; they share one ``ApiClient`` and its connection pool. Each method blocks for at most
    one request (``list_all``: one per page), bounded by ``request_timeout`` seconds.
    """

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
        """Wrap ``api_client`` (its configuration is used as is). ``owns_client``: close it in
        :meth:`close`. ``transport``: ``"lean"`` or ``"client"``. ``workers``: size the pool
        for that many threads now (see :meth:`size_pool`). ``kinds``: the kind table (default:
        the process-wide one). Runs on the caller's thread; raises ``InvalidConfigError``."""
        if not isinstance(api_client, k8s.ApiClient):
            raise InvalidConfigError(
                f"api_client must be a kubernetes ApiClient, got {api_client!r}"
            )
        if kinds is not None and not isinstance(kinds, KindTable):
            raise InvalidConfigError(f"kinds must be a KindTable, got {kinds!r}")
        self._api_client = api_client
        self._timeout = check_timeout(request_timeout)
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
        stays on. Runs on the caller's thread.
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidConfigError(f"url must be an http(s) URL, got {url!r}")
        check_workers(workers)
        check_timeout(request_timeout)
        cfg = k8s.Configuration(host=url.rstrip("/"))
        if token is not None:
            cfg.api_key = {"authorization": token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        if ca_cert is not None:
            cfg.ssl_ca_cert = ca_cert
        return cls._owning(cfg, workers, request_timeout, transport, kinds)

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
        and context (default: its current context).

        The file is never written back (token refreshes stay in memory). A file that is
        missing, unreadable or broken, an unknown context, or one that names a cluster or user
        the file lacks raises :class:`~kdispatch.InvalidConfigError` naming the
        file and the context (the official client's error, or the YAML parser's, is its
        ``__cause__``). Runs on the caller's thread.
        """
        check_workers(workers)
        check_timeout(request_timeout)
        if path is not None and not isinstance(path, str | os.PathLike):
            raise InvalidConfigError(f"path must be a file path or None, got {path!r}")
        if context is not None and (not isinstance(context, str) or not context):
            raise InvalidConfigError(f"context must be a non-empty str or None, got {context!r}")
        cfg = k8s.Configuration()
        load_kubeconfig(cfg, path, context)
        return cls._owning(cfg, workers, request_timeout, transport, kinds)

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
        check_workers(workers)
        check_timeout(request_timeout)
        cfg = k8s.Configuration()
        load: Any = k8s_config.load_incluster_config
        load(client_configuration=cfg)
        return cls._owning(cfg, workers, request_timeout, transport, kinds)

    @classmethod
    def _owning(
        cls,
        cfg: Any,
        workers: int,
        request_timeout: float,
        transport: TransportName,
        kinds: KindTable | None,
    ) -> KubernetesBackend:
        """A backend owning a new ``ApiClient`` on ``cfg``, its pool sized for ``workers``.
        Caller's thread."""
        prepare_configuration(cfg, workers)
        return cls(
            k8s.ApiClient(cfg),
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
        """The client-side timeout of every request, in seconds."""
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
        if not isinstance(path, str) or not path.startswith(("/api", "/apis")) or ".." in path:
            raise InvalidRequestError(f"path must be an API path, got {path!r}")
        reply = self._transport.request("GET", path, what=f"get {path}", timeout=self._timeout)
        return reply.data

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """GET one object as a JSON dict. Executor worker thread."""
        info = self._target(kind, namespace, name)
        what = f"get {kind} {_ref(namespace, name)}"
        reply = self._transport.request(
            "GET", info.path(namespace, name), what=what, timeout=self._timeout
        )
        return _typed(decode_object(reply.data, what), info, what)

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
        """One page of objects of ``kind`` (in ``namespace``, or every namespace when None).
        ``limit``/``continue_token`` page through a large collection. Calling thread.

        Returns an :class:`ObjectList` NamedTuple, not a bare list: ``page.items`` (the plain
        JSON dicts, ``kind``/``apiVersion`` filled in), ``page.resource_version`` (to watch
        from) and ``page.continue_token`` (None on the last page); it also unpacks,
        ``items, rv, token = backend.list("Pod")``. :meth:`list_all` follows the pages."""
        info = self._kinds.lookup(kind)
        path = self._collection(info, namespace)
        query = _selectors(label_selector, field_selector)
        check_page_limit(limit)
        if limit is not None:
            query.append(("limit", str(limit)))
        if continue_token is not None:
            query.append(("continue", _text("continue_token", continue_token)))
        if resource_version is not None:
            query.append(("resourceVersion", _text("resource_version", resource_version)))
        what = f"list {kind}"
        reply = self._transport.request("GET", path, what=what, timeout=self._timeout, query=query)
        return _object_list(decode_object(reply.data, what), info, what)

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
        resourceVersion of the list (to watch from). Calling thread."""
        items: builtins.list[dict[str, Any]] = []
        token: str | None = None
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
            if not page.continue_token:
                return items, page.resource_version
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
        :class:`~kdispatch.ClientListWatch`, which decodes it). The read
        timeout is ``timeout_seconds`` plus the request timeout. Calling thread."""
        info = self._kinds.lookup(kind)
        path = self._collection(info, namespace)
        if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, int):
            raise InvalidRequestError(f"timeout_seconds must be an int, got {timeout_seconds!r}")
        query = [("watch", "true"), *_selectors(label_selector, field_selector)]
        if resource_version:
            query.append(("resourceVersion", _text("resource_version", resource_version)))
        query.append(("timeoutSeconds", str(max(1, timeout_seconds))))
        if bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        return self._transport.stream(
            path,
            what=f"watch {kind}",
            timeout=(self._timeout, max(1, timeout_seconds) + self._timeout),
            query=query,
        )

    def create(self, kind: str, namespace: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """POST a new object; returns what the server stored. Executor worker thread."""
        info = self._kinds.lookup(kind)
        if not isinstance(obj, Mapping):
            raise InvalidRequestError(f"obj must be a mapping, got {type(obj).__name__}")
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        self._target(kind, namespace, name)
        body = {"apiVersion": info.api_version, "kind": kind, **obj}
        what = f"create {kind} {_ref(namespace, str(name))}"
        reply = self._transport.request(
            "POST",
            self._collection(info, namespace),
            what=what,
            timeout=self._timeout,
            body=body,
        )
        return _typed(decode_object(reply.data, what), info, what)

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
        info = self._target(kind, namespace, name)
        if subresource is not None and subresource not in _SUBRESOURCE_NAMES:
            raise InvalidRequestError(f"unsupported subresource {subresource!r}")
        if subresource == "status" and not info.status:
            raise InvalidRequestError(f"{kind} has no status subresource")
        if uid is not None:
            _check_uid(uid)
        if resource_version is not None and (
            not isinstance(resource_version, str) or not resource_version
        ):
            raise InvalidRequestError(
                f"resource_version must be a non-empty str or None, got {resource_version!r}"
            )
        flavour = info.patch if patch_type is None else patch_type
        if flavour not in _CONTENT_TYPES:
            raise InvalidRequestError(
                f"patch_type must be 'strategic', 'merge' or 'json', got {patch_type!r}"
            )
        body: object
        if flavour == "json":
            if isinstance(patch, Mapping | str | bytes) or not isinstance(patch, Sequence):
                raise InvalidRequestError("a JSON patch must be a list of operations")
            body = [*_tests(uid, resource_version), *(_op(op) for op in patch)]
        else:
            if not isinstance(patch, Mapping):
                raise InvalidRequestError(f"patch must be a dict, got {type(patch).__name__}")
            body = _with_preconditions(patch, uid, resource_version)
        suffix = f"/{subresource}" if subresource else ""
        what = f"patch {kind} {_ref(namespace, name)}{suffix}"
        reply = self._transport.request(
            "PATCH",
            info.path(namespace, name, subresource),
            what=what,
            timeout=self._timeout,
            body=body,
            content_type=_CONTENT_TYPES[flavour],
        )
        return _typed(decode_object(reply.data, what), info, what)

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
        info = self._target(kind, namespace, name)
        if subresource not in _SUBRESOURCE_NAMES:
            raise InvalidRequestError(f"unsupported subresource {subresource!r}")
        what = f"create {kind} {_ref(namespace, name)}/{subresource}"
        reply = self._transport.request(
            "POST",
            info.path(namespace, name, subresource),
            what=what,
            timeout=self._timeout,
            body=dict(body),
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
        self._target(kind, namespace, name)
        info = self._kinds.lookup(kind)
        _check_uid(uid)
        options = _delete_options(uid, resource_version, grace_period_seconds)
        if propagation_policy is not None:
            if propagation_policy not in ("Orphan", "Background", "Foreground"):
                raise InvalidRequestError(f"invalid propagation_policy {propagation_policy!r}")
            options["propagationPolicy"] = propagation_policy
        self._transport.request(
            "DELETE",
            info.path(namespace, name),
            what=f"delete {kind} {_ref(namespace, name)}",
            timeout=self._timeout,
            body=options,
        )

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
        if patch_type is not None and patch_type not in ("strategic", "merge"):
            raise InvalidRequestError(
                f"patch_type must be 'strategic' or 'merge', got {patch_type!r}"
            )
        _check_uid(uid)
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
        self._target("Pod", namespace, name)
        _check_uid(uid)
        if not is_dns_subdomain(node):
            raise InvalidRequestError(f"invalid node name {node!r}")
        what = f"bind {_ref(namespace, name)} to {node}"
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        code, reply = self.create_subresource("Pod", namespace, name, "binding", body)
        _check_created(code, reply, "Binding", what)
        logger.bind(pod=_ref(namespace, name), uid=uid, node=node).debug("bound")

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
        self._target("Pod", namespace, name)
        _check_uid(uid)
        what = f"evict {_ref(namespace, name)}"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": _delete_options(uid, None, grace_period_seconds),
        }
        code, reply = self.create_subresource("Pod", namespace, name, "eviction", body)
        _check_created(code, reply, "Eviction", what)
        logger.bind(pod=_ref(namespace, name), uid=uid).debug("evicted")

    # ----------------------------------------------------------------- helpers

    def _target(self, kind: object, namespace: object, name: object) -> KindInfo:
        """The kind's facts, after rejecting malformed names before anything is sent."""
        info = self._kinds.lookup(kind)
        if not info.namespaced:
            if namespace not in ("", None):
                raise InvalidRequestError(f"{kind} is cluster-scoped, got namespace {namespace!r}")
        elif not is_dns_label(namespace):
            raise InvalidRequestError(f"invalid namespace {namespace!r}")
        if not is_dns_subdomain(name):
            raise InvalidRequestError(f"invalid name {name!r}")
        return info

    @staticmethod
    def _collection(info: KindInfo, namespace: str | None) -> str:
        if namespace is not None and namespace != "":
            if not info.namespaced:
                raise InvalidRequestError(
                    f"{info.kind} is cluster-scoped, got namespace {namespace!r}"
                )
            if not is_dns_label(namespace):
                raise InvalidRequestError(f"invalid namespace {namespace!r}")
        return info.collection_path(namespace or None)


def _ref(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _check_uid(uid: object) -> None:
    if not isinstance(uid, str) or not uid:
        raise InvalidRequestError(f"uid must be a non-empty str, got {uid!r}")


def _text(what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{what} must be a non-empty str, got {value!r}")
    return value


def _selectors(label_selector: object, field_selector: object) -> list[tuple[str, str]]:
    query: list[tuple[str, str]] = []
    if label_selector is not None:
        query.append(("labelSelector", _text("label_selector", label_selector)))
    if field_selector is not None:
        query.append(("fieldSelector", _text("field_selector", field_selector)))
    return query


def _delete_options(
    uid: str, resource_version: str | None, grace_period_seconds: object
) -> dict[str, Any]:
    check_grace_period(grace_period_seconds)
    pre: dict[str, str] = {"uid": uid}
    if resource_version is not None:
        pre["resourceVersion"] = _text("resource_version", resource_version)
    options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": pre}
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    return options


def _with_preconditions(
    patch: Mapping[str, Any], uid: str | None, resource_version: str | None
) -> dict[str, Any]:
    """A copy of ``patch`` whose ``metadata`` carries the UID / resourceVersion preconditions."""
    body = dict(patch)
    if uid is None and resource_version is None:
        return body
    existing = body.get("metadata")
    metadata = dict(existing) if isinstance(existing, Mapping) else {}
    if uid is not None:
        metadata["uid"] = uid
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    body["metadata"] = metadata
    return body


def _tests(uid: str | None, resource_version: str | None) -> list[dict[str, Any]]:
    """JSON patch ``test`` operations for the preconditions."""
    ops: list[dict[str, Any]] = []
    if uid is not None:
        ops.append({"op": "test", "path": "/metadata/uid", "value": uid})
    if resource_version is not None:
        ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})
    return ops


def _op(op: object) -> dict[str, Any]:
    if not isinstance(op, Mapping) or not isinstance(op.get("op"), str):
        raise InvalidRequestError(f"a JSON patch operation must be a mapping with 'op': {op!r}")
    return dict(op)


def _check_created(code: int, reply: Mapping[str, Any], kind: str, what: str) -> None:
    """A subresource creation must answer 200/201 with a success ``Status`` or the object."""
    if code not in (200, 201):
        raise BadResponseError(f"{what}: unexpected HTTP {code}", status=code)
    reply_kind = reply.get("kind")
    if reply_kind == "Status":
        if reply.get("status") != "Success":
            raise BadResponseError(f"{what}: reply Status is {reply.get('status')!r}", status=code)
    elif reply_kind != kind:
        raise BadResponseError(f"{what}: reply kind is {reply_kind!r}", status=code)


def _typed(obj: dict[str, Any], info: KindInfo, what: str) -> dict[str, Any]:
    """Check that a decoded reply is of the kind; fill ``kind``/``apiVersion`` when absent."""
    got = obj.get("kind")
    if got is None:
        obj["kind"] = info.kind
        obj.setdefault("apiVersion", info.api_version)
    elif got != info.kind:
        raise BadResponseError(f"{what}: reply kind is {got!r}, expected {info.kind!r}")
    if not isinstance(obj.get("metadata"), Mapping):
        raise BadResponseError(f"{what}: reply has no metadata")
    return obj


def _object_list(body: dict[str, Any], info: KindInfo, what: str) -> ObjectList:
    items = body.get("items")
    meta = body.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    token = meta.get("continue") if isinstance(meta, Mapping) else None
    if items is None:
        items = []
    if not isinstance(items, list) or not isinstance(rv, str) or not rv:
        raise BadResponseError(f"{what}: reply has no items or no resourceVersion")
    if not all(isinstance(item, dict) for item in items):
        raise BadResponseError(f"{what}: reply has a non-object item")
    for item in items:
        if item.get("kind") != info.kind:
            item["kind"] = info.kind
        item.setdefault("apiVersion", info.api_version)
    return ObjectList(items, rv, token if isinstance(token, str) and token else None)
