"""The kind table: kind → (group, version, plural, namespaced, status subresource, patch flavour),
the one source of truth for where a kind lives in the REST API (docs/kinds.md). A
:class:`KindTable` may be read and extended from any thread (registration swaps an immutable
mapping under a lock; lookups are a dict get).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from .errors import InvalidInputError, UnknownKindError

PatchType = Literal["strategic", "merge"]
"""An object-shaped patch: strategic merge (built-in kinds) or RFC 7386 JSON merge (CRDs)."""

PATCH_TYPES: frozenset[str] = frozenset({"strategic", "merge"})

_KIND = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$")
_PLURAL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_GROUP = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$")
_VERSION = re.compile(r"^v[0-9]+((alpha|beta)[0-9]+)?$")


@dataclass(frozen=True, slots=True)
class KindInfo:
    """Where one kind lives in the REST API. Immutable."""

    kind: str
    group: str
    """API group; ``""`` for the core group (``/api/v1``)."""
    version: str
    plural: str
    """The resource name in URLs, e.g. ``pods``."""
    namespaced: bool = True
    status: bool = True
    """Whether the kind has a ``status`` subresource."""
    patch: PatchType = "merge"
    """Flavour of object-shaped patches: ``strategic`` for built-ins, ``merge`` for CRDs."""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not _KIND.match(self.kind):
            raise InvalidInputError(f"invalid kind {self.kind!r}: want e.g. 'QuotaClaim'")
        if not isinstance(self.group, str) or not _GROUP.match(self.group):
            raise InvalidInputError(f"invalid API group {self.group!r}")
        if not isinstance(self.version, str) or not _VERSION.match(self.version):
            raise InvalidInputError(f"invalid API version {self.version!r}: want e.g. 'v1'")
        if not isinstance(self.plural, str) or not _PLURAL.match(self.plural):
            raise InvalidInputError(f"invalid plural {self.plural!r}: want e.g. 'quotaclaims'")
        for name in ("namespaced", "status"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidInputError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.patch, str) or self.patch not in PATCH_TYPES:
            raise InvalidInputError(f"patch must be 'strategic' or 'merge', got {self.patch!r}")

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, else ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """``/api/v1`` or ``/apis/<group>/<version>``."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        """The URL path of the collection (every namespace when ``namespace`` is None, and
        always for cluster-scoped kinds)."""
        if self.namespaced and namespace:
            return f"{self.prefix}/namespaces/{namespace}/{self.plural}"
        return f"{self.prefix}/{self.plural}"

    def path(self, namespace: str, name: str, subresource: str | None = None) -> str:
        """The URL path of one object (or of one of its subresources)."""
        base = f"{self.collection_path(namespace if self.namespaced else None)}/{name}"
        return f"{base}/{subresource}" if subresource else base


def _builtin(
    kind: str, group: str, version: str, plural: str, *, cluster: bool = False, status: bool = True
) -> KindInfo:
    """A built-in kind (strategic merge patches); ``cluster``: not namespaced."""
    return KindInfo(kind, group, version, plural, not cluster, status, "strategic")


BUILTIN_KINDS: tuple[KindInfo, ...] = (
    _builtin("Pod", "", "v1", "pods"),
    _builtin("Node", "", "v1", "nodes", cluster=True),
    _builtin("Namespace", "", "v1", "namespaces", cluster=True),
    _builtin("ConfigMap", "", "v1", "configmaps", status=False),
    _builtin("Secret", "", "v1", "secrets", status=False),
    _builtin("ServiceAccount", "", "v1", "serviceaccounts", status=False),
    _builtin("Service", "", "v1", "services"),
    # One kind, one place: ``Event`` is the events.k8s.io/v1 resource (what a recorder
    # writes). The same objects are served as core v1 Events; to address them there instead,
    # re-register the kind: ``register_kind("Event", "", "v1", "events", status=False,
    # patch="strategic", replace=True)``.
    _builtin("Event", "events.k8s.io", "v1", "events", status=False),
    _builtin("PersistentVolume", "", "v1", "persistentvolumes", cluster=True),
    _builtin("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims"),
    _builtin("Deployment", "apps", "v1", "deployments"),
    _builtin("ReplicaSet", "apps", "v1", "replicasets"),
    _builtin("StatefulSet", "apps", "v1", "statefulsets"),
    _builtin("DaemonSet", "apps", "v1", "daemonsets"),
    _builtin("Job", "batch", "v1", "jobs"),
    _builtin("Lease", "coordination.k8s.io", "v1", "leases", status=False),
    _builtin("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets"),
    _builtin(
        "PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", cluster=True, status=False
    ),
    # beta, off by default in Kubernetes 1.37 (docs/kinds.md)
    _builtin("PodGroup", "scheduling.k8s.io", "v1beta1", "podgroups"),
    _builtin("StorageClass", "storage.k8s.io", "v1", "storageclasses", cluster=True, status=False),
    _builtin("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims"),
    _builtin("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", cluster=True, status=False),
    _builtin(
        "ResourceSlice", "resource.k8s.io", "v1", "resourceslices", cluster=True, status=False
    ),
    _builtin(
        "CustomResourceDefinition",
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        cluster=True,
    ),
)
"""The built-in kinds every table starts with."""


class KindTable:
    """kind → :class:`KindInfo`, extendable at run time. Thread-safe (see the module)."""

    def __init__(self, kinds: Iterable[KindInfo] = BUILTIN_KINDS) -> None:
        self._lock = threading.Lock()
        self._by_kind: Mapping[str, KindInfo] = MappingProxyType({})
        for info in kinds:
            self.add(info)

    def __getstate__(self) -> dict[str, list[KindInfo]]:
        """Pickle support (e.g. within a :class:`~kdispatch.CallTypeRegistry` sent to a
        :class:`~kdispatch.ProcessDispatcher`'s child): the kinds, without the lock."""
        return {"kinds": list(self._by_kind.values())}  # never empty: __setstate__ runs

    def __setstate__(self, state: dict[str, list[KindInfo]]) -> None:
        """Unpickle: a fresh lock, the same kinds."""
        self._lock = threading.Lock()
        self._by_kind = MappingProxyType({info.kind: info for info in state["kinds"]})

    def add(self, info: KindInfo, *, replace: bool = False) -> KindInfo:
        """Add ``info``. A kind already present with different facts raises
        :class:`InvalidInputError` unless ``replace``; the same facts again are a no-op."""
        if not isinstance(info, KindInfo):
            raise InvalidInputError(f"expected a KindInfo, got {type(info).__name__}")
        with self._lock:
            current = self._by_kind.get(info.kind)
            if current is not None and current != info and not replace:
                raise InvalidInputError(
                    f"kind {info.kind!r} is already registered as {current.api_version} "
                    f"{current.plural}; pass replace=True to change it"
                )
            self._by_kind = MappingProxyType({**self._by_kind, info.kind: info})
        return info

    def register(
        self,
        kind: str,
        group: str,
        version: str,
        plural: str,
        *,
        namespaced: bool = True,
        status: bool = True,
        patch: PatchType = "merge",
        replace: bool = False,
    ) -> KindInfo:
        """Register a kind (a CRD by default: JSON merge patches, with a status subresource).
        Raises :class:`InvalidInputError` for malformed facts or a clash (see :meth:`add`)."""
        return self.add(
            KindInfo(kind, group, version, plural, namespaced, status, patch), replace=replace
        )

    def lookup(self, kind: object) -> KindInfo:
        """The facts of ``kind``; :class:`UnknownKindError` when it is not registered."""
        info = self._by_kind.get(kind) if isinstance(kind, str) else None
        if info is None:
            raise UnknownKindError(
                f"unknown kind {kind!r}: register it with kdispatch.register_kind(kind, group, "
                "version, plural) or fill the table from discovery "
                "(kdispatch.register_from_discovery(backend))"
            )
        return info

    def get(self, kind: str) -> KindInfo | None:
        """The facts of ``kind`` or None."""
        return self._by_kind.get(kind)

    def by_resource(self, group: str, version: str, plural: str) -> KindInfo | None:
        """The kind served at ``group/version/plural``, or None."""
        for info in self._by_kind.values():
            if info.plural == plural and info.group == group and info.version == version:
                return info
        return None

    def __contains__(self, kind: object) -> bool:
        return isinstance(kind, str) and kind in self._by_kind

    def __iter__(self) -> Iterator[KindInfo]:
        return iter(list(self._by_kind.values()))

    def __len__(self) -> int:
        return len(self._by_kind)

    def kinds(self) -> list[str]:
        """Registered kind names, sorted."""
        return sorted(self._by_kind)


DEFAULT_KINDS = KindTable()
"""The process-wide table every component uses unless given another one."""


register = DEFAULT_KINDS.register
"""Register a kind in :data:`DEFAULT_KINDS`: :meth:`KindTable.register` of the process-wide
table (same arguments, same errors). Any thread."""
