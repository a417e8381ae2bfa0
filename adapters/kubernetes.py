"""``KubernetesBackend``: the :class:`~kdispatch.actors.backend.ApiBackend` over the official
client.

Every request goes through one shared :class:`kubernetes.client.ApiClient` (its urllib3 pool is
thread-safe; size ``connection_pool_maxsize`` to at least the executor's worker count, which the
``for_url`` / ``from_kubeconfig`` / ``in_cluster`` constructors do) and carries a client-side
timeout. Replies are read with ``_preload_content=False`` and decoded here as JSON dicts: that is
the form kdispatch works with, it avoids building model objects, and it sidesteps the client's
failure to decode the ``Status`` that ``pods/binding`` answers with.

Upstream facts this module relies on:

* a dict body sent with ``Content-Type: application/strategic-merge-patch+json`` merges
  ``status.conditions`` by ``type`` on the server; ``metadata.resourceVersion`` in a patch
  body is a precondition (mismatch → 409 Conflict); ``metadata.uid`` in a patch body is applied
  to the object, so a mismatch is 422 Invalid ``metadata.uid: field is immutable`` — mapped
  here to :class:`ConflictError`, the UID precondition failure it is (a UID precondition on a
  binding or a deletion is a plain 409 Conflict);
* ``pods/binding`` answers ``Status{code: 201}``; a pod that is already bound gets 409;
* a 429 carries ``Retry-After`` (and usually ``details.retryAfterSeconds``);
* ``resource.k8s.io/v1`` serves ResourceClaims and their ``status`` subresource.

Errors are mapped to :mod:`actors.errors` (see :func:`map_api_exception` and
:func:`map_transport_error`). Exception messages carry the operation, HTTP status, reason and
the server's message, never request headers: bearer tokens do not appear in them or in logs.
urllib3's own retries are switched off (the executor owns the retry policy).
"""

from __future__ import annotations

import http.client
import json
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from loguru import logger

from kdispatch.actors.backend import PatchType
from kdispatch.actors.errors import (
    AlreadyExistsError,
    ApiConnectionError,
    ApiError,
    BadResponseError,
    ConflictError,
    GoneError,
    InvalidRequestError,
    NotFoundError,
    RequestTimeoutError,
    ServerError,
    TooManyRequestsError,
)
from kdispatch.actors.objects import is_dns_label, is_dns_subdomain

POD = "Pod"
RESOURCE_CLAIM = "ResourceClaim"
NODE = "Node"

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"

_API_VERSIONS = {POD: "v1", NODE: "v1", RESOURCE_CLAIM: "resource.k8s.io/v1"}
_MESSAGE_LIMIT = 300

T = TypeVar("T")


# --------------------------------------------------------------------------- error mapping


def _status_body(body: object) -> Mapping[str, Any]:
    """The ``Status`` object in an error reply, or an empty mapping when there is none."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            return {}
    if not isinstance(body, str) or not body:
        return {}
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _retry_after(headers: Mapping[str, str] | None, status: Mapping[str, Any]) -> float:
    """Seconds to wait, from ``Retry-After`` (delta-seconds) or ``details.retryAfterSeconds``."""
    if headers is not None:
        raw = headers.get("Retry-After")
        if raw is not None:
            try:
                value = float(raw.strip())
            except ValueError:  # an HTTP-date or garbage: fall back to the Status details
                value = -1.0
            if math.isfinite(value) and value >= 0:
                return value
    details = status.get("details")
    if isinstance(details, Mapping):
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0:
            return float(seconds)
    return 0.0


def map_api_exception(exc: ApiException, what: str) -> ApiError:
    """Translate an HTTP error reply of the official client into an :class:`ApiError`.

    ``what`` names the operation for the message (e.g. ``"bind default/p1"``).
    """
    code = exc.status if isinstance(exc.status, int) else 0
    if code == 0:
        # Raised by the client's REST layer itself (TLS failure, unpreparable request).
        return ApiConnectionError(
            f"{what}: {str(exc.reason or 'transport error')[:_MESSAGE_LIMIT]}"
        )
    headers = exc.headers if isinstance(exc.headers, Mapping) else None
    return error_from_status(code, _status_body(exc.body), what, headers, http_reason=exc.reason)


def error_from_status(
    code: int,
    status: Mapping[str, Any],
    what: str,
    headers: Mapping[str, str] | None = None,
    *,
    http_reason: object = None,
) -> ApiError:
    """The :class:`ApiError` for HTTP ``code`` with its ``Status`` body (possibly empty), as
    answered to a request or carried by a watch ``ERROR`` event."""
    reason = status.get("reason") if isinstance(status.get("reason"), str) else None
    server_msg = status.get("message") if isinstance(status.get("message"), str) else ""
    text = f"{what}: HTTP {code} {reason or http_reason or ''}".rstrip()
    if server_msg:
        text += f": {server_msg[:_MESSAGE_LIMIT]}"
    if code == 404:
        return NotFoundError(text)
    if code == 409:
        if reason == "AlreadyExists":
            return AlreadyExistsError(text)
        return ConflictError(text)
    if code == 410:
        return GoneError(text)
    if code == 429:
        return TooManyRequestsError(text, retry_after=_retry_after(headers, status))
    if code in (408, 504):
        return RequestTimeoutError(text, status=code)
    if 500 <= code <= 599:
        return ServerError(text, status=code)
    if code == 422 and _uid_mismatch(status):
        return ConflictError(text)
    if 400 <= code <= 499:
        return InvalidRequestError(text, status=code)
    return BadResponseError(text, status=code)


def _uid_mismatch(status: Mapping[str, Any]) -> bool:
    """Whether a 422 reply rejects the patch body's ``metadata.uid`` (the object's UID is not
    the one the patch was meant for: the object was deleted and re-created)."""
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    if not isinstance(causes, list):
        return False
    return any(isinstance(c, Mapping) and c.get("field") == "metadata.uid" for c in causes)


def map_transport_error(exc: BaseException, what: str) -> ApiError:
    """Translate a urllib3 / socket failure (no HTTP reply) into an :class:`ApiError`."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    name = type(exc).__name__
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        return ApiConnectionError(f"{what}: cannot connect ({name})")
    if isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError):
        return RequestTimeoutError(f"{what}: client-side timeout ({name})")
    return ApiConnectionError(f"{what}: connection failed ({name})")


@contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Run a client call, re-raising its failures as :mod:`actors.errors` types."""
    try:
        yield
    except ApiError:
        raise
    except ApiException as exc:
        raise map_api_exception(exc, what) from exc
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
        raise map_transport_error(exc, what) from exc


def read_json_object(resp: Any, what: str) -> dict[str, Any]:
    """Read a whole ``_preload_content=False`` reply and decode it as one JSON object."""
    try:
        data = resp.data
    finally:
        resp.release_conn()
    if not isinstance(data, bytes | bytearray):
        raise BadResponseError(f"{what}: empty reply")
    try:
        parsed = json.loads(data)
    except UnicodeDecodeError:
        raise BadResponseError(f"{what}: reply is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BadResponseError(f"{what}: reply is not JSON ({exc.msg})") from None
    if not isinstance(parsed, dict):
        raise BadResponseError(f"{what}: reply is a JSON {type(parsed).__name__}, not an object")
    return parsed


def drain(resp: Any) -> None:
    """Read and discard a ``_preload_content=False`` reply, returning the connection to the pool."""
    try:
        resp.drain_conn()
    finally:
        resp.release_conn()


# --------------------------------------------------------------------------- configuration


def no_urllib3_retries() -> urllib3.Retry:
    """A retry policy that never retries: the executor decides about retries."""
    return urllib3.Retry(total=0, connect=0, read=0, redirect=0, status=0, other=0)


def prepare_configuration(cfg: k8s.Configuration, workers: int) -> k8s.Configuration:
    """Size the connection pool for ``workers`` threads and switch off urllib3 retries."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidRequestError(f"workers must be a positive int, got {workers!r}")
    current = cfg.connection_pool_maxsize or 0
    cfg.connection_pool_maxsize = max(int(current), workers)
    cfg.retries = no_urllib3_retries()
    return cfg


def _check_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidRequestError(f"request_timeout must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise InvalidRequestError("request_timeout must be finite")
    return float(value)


# --------------------------------------------------------------------------- the backend


class KubernetesBackend:
    """:class:`~kdispatch.actors.backend.ApiBackend` over the official ``kubernetes`` client.

    Thread-safe: every method may be called from any number of executor worker threads at
    once; they share one ``ApiClient`` and its connection pool. Each method blocks for at most
    one request, bounded by ``request_timeout`` seconds.
    """

    def __init__(
        self, api_client: k8s.ApiClient, *, request_timeout: float = 10.0, owns_client: bool = False
    ) -> None:
        """Wrap ``api_client`` (its configuration is used as is). ``owns_client``: close it in
        :meth:`close`. Runs on the caller's thread."""
        if not isinstance(api_client, k8s.ApiClient):
            raise InvalidRequestError(
                f"api_client must be a kubernetes ApiClient, got {api_client!r}"
            )
        self._api_client = api_client
        self._timeout = _check_timeout(request_timeout)
        self._owns_client = owns_client
        # The generated API classes are only partly typed; replies are handled as raw urllib3
        # responses here, so they are used through Any.
        self._core: Any = k8s.CoreV1Api(api_client)
        self._resource: Any = k8s.ResourceV1Api(api_client)

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
    ) -> KubernetesBackend:
        """A backend for an apiserver at ``url`` (tests, or a proxy such as ``kubectl proxy``).

        ``token``: a bearer token; ``ca_cert``: a CA bundle file for https. TLS verification
        stays on. Runs on the caller's thread.
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidRequestError(f"url must be an http(s) URL, got {url!r}")
        cfg = k8s.Configuration(host=url.rstrip("/"))
        if token is not None:
            cfg.api_key = {"authorization": token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        if ca_cert is not None:
            cfg.ssl_ca_cert = ca_cert
        prepare_configuration(cfg, workers)
        return cls(k8s.ApiClient(cfg), request_timeout=request_timeout, owns_client=True)

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | None = None,
        context: str | None = None,
        *,
        workers: int = 8,
        request_timeout: float = 10.0,
    ) -> KubernetesBackend:
        """A backend from a kubeconfig file (default ``~/.kube/config``) and context.

        The file is never written back (token refreshes stay in memory). Runs on the caller's
        thread.
        """
        cfg = k8s.Configuration()
        load: Any = k8s_config.load_kube_config
        load(config_file=path, context=context, client_configuration=cfg, persist_config=False)
        prepare_configuration(cfg, workers)
        return cls(k8s.ApiClient(cfg), request_timeout=request_timeout, owns_client=True)

    @classmethod
    def in_cluster(cls, *, workers: int = 8, request_timeout: float = 10.0) -> KubernetesBackend:
        """A backend from the pod's service account (token and CA mounted by the kubelet).
        Runs on the caller's thread."""
        cfg = k8s.Configuration()
        load: Any = k8s_config.load_incluster_config
        load(client_configuration=cfg)
        prepare_configuration(cfg, workers)
        return cls(k8s.ApiClient(cfg), request_timeout=request_timeout, owns_client=True)

    # ----------------------------------------------------------------- properties / lifecycle

    @property
    def api_client(self) -> k8s.ApiClient:
        """The shared client (for informers built on the same connection settings)."""
        return self._api_client

    @property
    def request_timeout(self) -> float:
        """The client-side timeout of every request, in seconds."""
        return self._timeout

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
        return f"KubernetesBackend(host={host!r}, request_timeout={self._timeout})"

    # ----------------------------------------------------------------- ApiBackend

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """GET one object as a JSON dict. Executor worker thread."""
        _check_target(kind, namespace, name)
        what = f"get {kind} {_ref(namespace, name)}"
        call: Callable[..., Any]
        args: tuple[str, ...]
        if kind == POD:
            call, args = self._core.read_namespaced_pod, (name, namespace)
        elif kind == RESOURCE_CLAIM:
            call, args = self._resource.read_namespaced_resource_claim, (name, namespace)
        else:
            call, args = self._core.read_node, (name,)
        with translate_errors(what):
            resp = call(*args, _preload_content=False, _request_timeout=self._timeout)
            obj = read_json_object(resp, what)
        return _with_kind(obj, kind, what)

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
    ) -> dict[str, Any]:
        """PATCH the ``status`` subresource with UID / resourceVersion preconditions carried in
        the body's metadata. Returns the updated object. Executor worker thread."""
        _check_target(kind, namespace, name)
        if kind == NODE:
            raise InvalidRequestError("patch_status supports Pod and ResourceClaim, not Node")
        _check_uid(uid)
        if resource_version is not None and (
            not isinstance(resource_version, str) or not resource_version
        ):
            raise InvalidRequestError(
                f"resource_version must be a non-empty str or None, got {resource_version!r}"
            )
        if patch_type not in ("strategic", "merge"):
            raise InvalidRequestError(
                f"patch_type must be 'strategic' or 'merge', got {patch_type!r}"
            )
        if not isinstance(patch, Mapping):
            raise InvalidRequestError(f"patch must be a dict, got {type(patch).__name__}")
        body = _with_preconditions(patch, uid, resource_version)
        content_type = STRATEGIC_MERGE_PATCH if patch_type == "strategic" else MERGE_PATCH
        what = f"patch {kind} {_ref(namespace, name)}/status"
        call = (
            self._core.patch_namespaced_pod_status
            if kind == POD
            else self._resource.patch_namespaced_resource_claim_status
        )
        with translate_errors(what):
            resp = call(
                name,
                namespace,
                body,
                _content_type=content_type,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            obj = read_json_object(resp, what)
        return _with_kind(obj, kind, what)

    def bind(self, namespace: str, name: str, *, uid: str, node: str) -> None:
        """POST ``pods/binding`` (UID precondition in the Binding's metadata) and check that the
        server answered 200/201 with a success ``Status`` (or the Binding). Executor worker
        thread."""
        _check_target(POD, namespace, name)
        _check_uid(uid)
        if not is_dns_subdomain(node):
            raise InvalidRequestError(f"invalid node name {node!r}")
        what = f"bind {_ref(namespace, name)} to {node}"
        body = k8s.V1Binding(
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, uid=uid),
            target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        with translate_errors(what):
            resp = self._core.create_namespaced_pod_binding(
                name, namespace, body, _preload_content=False, _request_timeout=self._timeout
            )
            code = resp.status
            reply = read_json_object(resp, what)
        if code not in (200, 201):
            raise BadResponseError(f"{what}: unexpected HTTP {code}", status=code)
        reply_kind = reply.get("kind")
        if reply_kind == "Status":
            if reply.get("status") != "Success":
                raise BadResponseError(
                    f"{what}: reply Status is {reply.get('status')!r}", status=code
                )
        elif reply_kind != "Binding":
            raise BadResponseError(f"{what}: reply kind is {reply_kind!r}", status=code)
        logger.bind(pod=_ref(namespace, name), uid=uid, node=node).debug("bound")

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str,
        grace_period_seconds: int | None = None,
    ) -> None:
        """DELETE with a UID precondition (``V1DeleteOptions.preconditions``) and an optional
        grace period. 404 raises :class:`NotFoundError`. Executor worker thread."""
        _check_target(kind, namespace, name)
        if kind == NODE:
            raise InvalidRequestError("delete supports Pod and ResourceClaim, not Node")
        _check_uid(uid)
        if grace_period_seconds is not None and (
            isinstance(grace_period_seconds, bool)
            or not isinstance(grace_period_seconds, int)
            or grace_period_seconds < 0
        ):
            raise InvalidRequestError(
                f"grace_period_seconds must be an int >= 0 or None, got {grace_period_seconds!r}"
            )
        options = k8s.V1DeleteOptions(
            preconditions=k8s.V1Preconditions(uid=uid), grace_period_seconds=grace_period_seconds
        )
        what = f"delete {kind} {_ref(namespace, name)}"
        call = (
            self._core.delete_namespaced_pod
            if kind == POD
            else self._resource.delete_namespaced_resource_claim
        )
        with translate_errors(what):
            resp = call(
                name,
                namespace,
                body=options,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            drain(resp)


# --------------------------------------------------------------------------- helpers


def _ref(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _check_uid(uid: object) -> None:
    if not isinstance(uid, str) or not uid:
        raise InvalidRequestError(f"uid must be a non-empty str, got {uid!r}")


def _check_target(kind: object, namespace: object, name: object) -> None:
    """Reject an unsupported kind or malformed names before anything is sent."""
    if kind not in _API_VERSIONS:
        raise InvalidRequestError(f"unsupported kind {kind!r}: want one of {sorted(_API_VERSIONS)}")
    if kind == NODE:
        if namespace not in ("", None):
            raise InvalidRequestError(f"Node is cluster-scoped, got namespace {namespace!r}")
    elif not is_dns_label(namespace):
        raise InvalidRequestError(f"invalid namespace {namespace!r}")
    if not is_dns_subdomain(name):
        raise InvalidRequestError(f"invalid name {name!r}")


def _with_preconditions(
    patch: Mapping[str, Any], uid: str, resource_version: str | None
) -> dict[str, Any]:
    """A copy of ``patch`` whose ``metadata`` carries the UID / resourceVersion preconditions."""
    body = dict(patch)
    existing = body.get("metadata")
    metadata = dict(existing) if isinstance(existing, Mapping) else {}
    metadata["uid"] = uid
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    body["metadata"] = metadata
    return body


def _with_kind(obj: dict[str, Any], kind: str, what: str) -> dict[str, Any]:
    """Check that a decoded reply is of ``kind``; fill ``kind``/``apiVersion`` when absent."""
    got = obj.get("kind")
    if got is None:
        obj["kind"] = kind
        obj.setdefault("apiVersion", _API_VERSIONS[kind])
    elif got != kind:
        raise BadResponseError(f"{what}: reply kind is {got!r}, expected {kind!r}")
    if not isinstance(obj.get("metadata"), Mapping):
        raise BadResponseError(f"{what}: reply has no metadata")
    return obj
