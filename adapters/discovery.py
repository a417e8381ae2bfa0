"""Fill a kind table from the apiserver's discovery documents (``/api/v1``, ``/apis``):
:func:`register_from_discovery`. Calling thread; errors are
:mod:`kdispatch.actors.model.errors` types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kdispatch.actors.model.errors import BadResponseError, InvalidInputError
from kdispatch.actors.model.kinds import KindInfo, KindTable, PatchType

from .kubernetes import KubernetesBackend
from .transport import decode_object

BUILTIN_GROUPS: frozenset[str] = frozenset(
    {"", "apps", "batch", "policy", "autoscaling", "extensions"}
)
"""Unsuffixed groups served by kube-apiserver itself (plus every ``*.k8s.io`` group)."""


def _flavour(group: str) -> PatchType:
    return "strategic" if group in BUILTIN_GROUPS or group.endswith(".k8s.io") else "merge"


def _get(backend: KubernetesBackend, path: str) -> dict[str, Any]:
    return decode_object(backend.get_path(path), f"discovery {path}")


def _kinds_of(group: str, version: str, doc: Mapping[str, Any]) -> list[KindInfo]:
    resources = doc.get("resources")
    if not isinstance(resources, list):
        raise BadResponseError(f"discovery {group}/{version}: no resources")
    names = {r.get("name") for r in resources if isinstance(r, Mapping)}
    found: list[KindInfo] = []
    for r in resources:
        if not isinstance(r, Mapping):
            continue
        name, kind = r.get("name"), r.get("kind")
        if not isinstance(name, str) or "/" in name or not isinstance(kind, str):
            continue  # a subresource, or garbage
        try:
            found.append(
                KindInfo(
                    kind,
                    group,
                    version,
                    name,
                    namespaced=bool(r.get("namespaced")),
                    status=f"{name}/status" in names,
                    patch=_flavour(group),
                )
            )
        except InvalidInputError:
            continue  # a resource whose names the table cannot hold
    return found


def register_from_discovery(
    backend: KubernetesBackend,
    table: KindTable | None = None,
    *,
    groups: Iterable[str] | None = None,
) -> list[KindInfo]:
    """Register the kinds the apiserver's discovery documents name in ``table`` (default: the
    backend's table), as the "Any kind and CRDs" guide describes; ``groups``: only these API
    groups (``""`` is the core group). Kinds already in the table keep their facts. Returns
    the kinds added. Calling thread."""
    if not isinstance(backend, KubernetesBackend):
        raise InvalidInputError(f"backend must be a KubernetesBackend, got {backend!r}")
    target = table if table is not None else backend.kinds
    wanted = None if groups is None else set(groups)
    versions: list[tuple[str, str]] = []
    if wanted is None or "" in wanted:
        versions.append(("", "v1"))
    for g in _get(backend, "/apis").get("groups") or []:
        if not isinstance(g, Mapping) or not isinstance(g.get("name"), str):
            continue
        preferred = g.get("preferredVersion")
        version = preferred.get("version") if isinstance(preferred, Mapping) else None
        if isinstance(version, str) and (wanted is None or g["name"] in wanted):
            versions.append((g["name"], version))
    added: list[KindInfo] = []
    for group, version in versions:
        path = f"/apis/{group}/{version}" if group else "/api/v1"
        for info in _kinds_of(group, version, _get(backend, path)):
            if info.kind in target:
                continue
            target.add(info)
            added.append(info)
    return added
