"""Patch semantics of the in-memory apiserver: strategic merge and JSON merge (RFC 7386).

Both functions are pure and copy-on-write: they never mutate their inputs and share unchanged
subtrees of the original with the result (the server never mutates a stored object, so sharing
is safe). The patch must already be owned JSON (see
:func:`kdispatch.testing.memory_objects.to_json`).

Strategic merge follows the apiserver for the fields kdispatch touches. Maps merge recursively
and ``null`` deletes a key; lists are replaced whole unless the field has a merge key, in which
case elements are matched by that key, merged recursively, and new ones appended. The merge keys
come from the upstream Go types (``patchMergeKey``): ``Pod.status.conditions`` by ``type``,
``podIPs``/``hostIPs`` by ``ip``, ``resourceClaimStatuses`` by ``name``, and
``ResourceClaim.status.reservedFor`` by ``uid``, ``PodGroup.status.conditions`` by ``type``
and its ``resourceClaimStatuses`` by ``name``; ``status.conditions`` of any other kind merges
by ``type``. Directives: ``$patch: replace|delete`` on a map or list element, ``$retainKeys`` on a
map; ``$setElementOrder/<field>`` of a list with a merge key puts the elements it names in
its order (those it does not name keep their places among them);
``$deleteFromPrimitiveList/<field>`` takes the scalars it lists out of that list (``null``
removes the field, as any ``null``; a list left empty is left out; no list, no change). A list
of scalars is replaced whole: ``metadata.finalizers``, which the apiserver merges, too. A
merged list is ordered as the apiserver orders it (apimachinery's ``normalizeElementOrder``):
the patch's elements in patch
order, interleaved with the elements only the original has, in their original order, by their
positions in the original; an element new to the list goes before any original-only one it
meets. So a patch ``[C, A]`` on ``[A, B]`` gives ``[C, A, B]``, and ``[B]`` on ``[A, B]`` keeps
``[A, B]``.

:func:`patch_object` applies a patch of any flavour (strategic, merge, or a JSON patch, RFC
6902) to a whole object; :func:`keep_identity` puts back what no patch changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdispatch.actors.model.errors import InvalidRequestError
from kdispatch.actors.model.objects import POD, POD_GROUP, RESOURCE_CLAIM

Path = tuple[str, ...]

STRATEGIC_REFUSED = (
    "the body of the request was in an unknown format: application/strategic-merge-patch+json, "
    "accepted media types include: application/json-patch+json, application/merge-patch+json"
)
"""kube-apiserver's 415 message for a strategic merge patch of a kind that has none (a CRD)."""


def check_patch_flavour(flavour: object, kind_flavour: str) -> None:
    """A strategic merge patch of a kind whose flavour is not strategic (a CRD) is refused
    as kube-apiserver refuses it: :class:`InvalidRequestError` with status 415. Pure."""
    if flavour == "strategic" and kind_flavour != "strategic":
        raise InvalidRequestError(STRATEGIC_REFUSED, status=415)


STATUS_MERGE_KEYS: Mapping[str, Mapping[Path, str]] = {
    POD: {
        ("conditions",): "type",
        ("podIPs",): "ip",
        ("hostIPs",): "ip",
        ("resourceClaimStatuses",): "name",
    },
    RESOURCE_CLAIM: {("reservedFor",): "uid"},
    POD_GROUP: {("conditions",): "type", ("resourceClaimStatuses",): "name"},
}
DEFAULT_STATUS_MERGE_KEYS: Mapping[Path, str] = {("conditions",): "type"}


class _Deleted:
    pass


_DELETED = _Deleted()


def status_merge_keys(kind: str) -> Mapping[Path, str]:
    """Merge keys of the lists under ``status`` of ``kind``, by path relative to ``status``."""
    return STATUS_MERGE_KEYS.get(kind, DEFAULT_STATUS_MERGE_KEYS)


def strategic_merge(
    original: Any, patch: dict[str, Any], keys: Mapping[Path, str]
) -> dict[str, Any]:
    """``original`` (a map, or anything else meaning empty) with the strategic-merge ``patch``
    applied. ``keys`` maps list paths (relative to ``original``) to their merge key.
    Raises :class:`InvalidRequestError` for malformed patches."""
    merged = _merge_map(original, patch, keys, ())
    return {} if isinstance(merged, _Deleted) else merged


def _merge_map(
    original: Any, patch: Mapping[str, Any], keys: Mapping[Path, str], path: Path
) -> dict[str, Any] | _Deleted:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETED
    if directive == "replace":
        return {k: v for k, v in patch.items() if not k.startswith("$") and v is not None}
    if directive is not None:
        raise InvalidRequestError(f"{_where(path)}: unknown $patch directive {directive!r}")
    out: dict[str, Any] = dict(original) if isinstance(original, dict) else {}
    listed = False  # a $setElementOrder or $deleteFromPrimitiveList: applied once merged
    for key, value in patch.items():
        if key.startswith("$"):
            if key.startswith(_LIST_DIRECTIVES):
                listed = True
            elif key != "$retainKeys":
                raise InvalidRequestError(f"{_where(path)}: unsupported directive {key!r}")
            continue
        sub = (*path, key)
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            merged = _merge_map(out.get(key), value, keys, sub)
            if isinstance(merged, _Deleted):
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list) and sub in keys:
            out[key] = _merge_list(out.get(key), value, keys[sub], keys, sub)
        else:
            out[key] = value
    if listed:
        for key, value in patch.items():
            if key.startswith(_DELETE_FROM):
                _delete_from_list(out, key.removeprefix(_DELETE_FROM), value)
                continue
            field = key.removeprefix(_SET_ORDER)
            if field != key and (*path, field) in keys and isinstance(out.get(field), list):
                before = original.get(field) if isinstance(original, dict) else None
                out[field] = _set_element_order(out[field], value, before, keys[(*path, field)])
    retain = patch.get("$retainKeys")
    if retain is not None:
        if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
            raise InvalidRequestError(f"{_where(path)}: $retainKeys must be a list of strings")
        out = {k: v for k, v in out.items() if k in retain}
    return out


_SET_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"
_LIST_DIRECTIVES = (_SET_ORDER, _DELETE_FROM)


def _delete_from_list(out: dict[str, Any], field: str, values: Any) -> None:
    """apimachinery's ``$deleteFromPrimitiveList/<field>``: the scalars ``values`` lists are
    taken out of ``out[field]`` (every occurrence), whatever the field's patch strategy, and a
    list left empty is left out. As there: ``null`` removes the field; a field that is absent
    or not a list, or values that are not a list, change nothing (200, no error)."""
    if values is None:
        out.pop(field, None)
        return
    current = out.get(field)
    if not isinstance(current, list) or not isinstance(values, list):
        return
    gone = {(type(v), v) for v in values if isinstance(v, str | int | float | bool)}
    kept = [v for v in current if isinstance(v, dict | list) or (type(v), v) not in gone]
    if not kept:  # an empty list is served as none (the fields are omitempty)
        out.pop(field, None)
    elif len(kept) != len(current):
        out[field] = kept


def _merge_list(
    original: Any, items: list[Any], key: str, keys: Mapping[Path, str], path: Path
) -> list[Any]:
    replace = {"$patch": "replace"}
    server: list[Any] = [] if replace in items or not isinstance(original, list) else original
    position = {cur.get(key): i for i, cur in enumerate(server) if isinstance(cur, dict)}
    patched: list[Any] = []  # merged elements of the patch, in patch order
    touched: set[Any] = set()
    for item in items:
        if item == replace:
            continue
        if not isinstance(item, dict) or not isinstance(item.get(key), str | int):
            raise InvalidRequestError(
                f"{_where(path)}: every element must be an object with merge key {key!r}"
            )
        touched.add(item[key])
        index = position.get(item[key])
        current = next((m for m in patched if m.get(key) == item[key]), None)
        if current is None and index is not None:
            current = server[index]
        merged = _merge_map(current, item, keys, path)
        patched = [m for m in patched if m.get(key) != item[key]]
        if not isinstance(merged, _Deleted):
            patched.append(merged)
    server_only = [cur for cur in server if not (isinstance(cur, dict) and cur.get(key) in touched)]
    return _interleave(patched, server_only, position, key)


def _set_element_order(merged: list[Any], order: Any, original: Any, key: str) -> list[Any]:
    """apimachinery's ``$setElementOrder/<field>``: the merged elements it names, in its
    order, interleaved (by their positions in the original) with those it does not name."""
    if not isinstance(order, list):
        raise InvalidRequestError(f"$setElementOrder must be a list, got {order!r}")
    rank = {e.get(key): i for i, e in enumerate(order) if isinstance(e, dict)}
    named = sorted(
        (m for m in merged if isinstance(m, dict) and m.get(key) in rank),
        key=lambda m: rank[m.get(key)],
    )
    others = [m for m in merged if not (isinstance(m, dict) and m.get(key) in rank)]
    before = original if isinstance(original, list) else []
    position = {e.get(key): i for i, e in enumerate(before) if isinstance(e, dict)}
    return _interleave(named, others, position, key)


def _interleave(
    patched: list[Any], server_only: list[Any], position: Mapping[Any, int], key: str
) -> list[Any]:
    """apimachinery's ``mergeSortedSlice``: merge two ordered lists by the elements' positions
    in the original list; an element the original lacks goes first."""
    out: list[Any] = []
    i = j = 0
    while i < len(patched) or j < len(server_only):
        if i >= len(patched):
            out.append(server_only[j])
            j += 1
            continue
        if j >= len(server_only):
            out.append(patched[i])
            i += 1
            continue
        left = position.get(patched[i].get(key))
        right = position.get(server_only[j].get(key)) if isinstance(server_only[j], dict) else None
        if left is not None and right is not None and right < left:
            out.append(server_only[j])
            j += 1
        else:
            out.append(patched[i])
            i += 1
    return out


def json_merge(original: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge recursively, ``null`` deletes, everything else
    (lists included) replaces."""
    if not isinstance(patch, dict):
        return patch
    out: dict[str, Any] = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = json_merge(out.get(key), value)
    return out


def _where(path: Path) -> str:
    return ".".join(path) or "patch root"


# --------------------------------------------------------------------------- JSON patch


class JsonPatchTestFailed(InvalidRequestError):
    """A JSON patch ``test`` operation did not hold (the apiserver answers 422)."""


def _pointer(path: object) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise InvalidRequestError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def _parent(doc: Any, tokens: list[str], path: object) -> tuple[Any, str]:
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict) and token in cur:
            cur = cur[token]
        elif isinstance(cur, list) and token.isdigit() and int(token) < len(cur):
            cur = cur[int(token)]
        else:
            raise InvalidRequestError(f"JSON patch path {path!r} does not exist")
    return cur, tokens[-1]


def _get(doc: Any, tokens: list[str], path: object) -> Any:
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise InvalidRequestError(f"JSON patch path {path!r} does not exist")


def _copy_path(doc: Any, tokens: list[str]) -> Any:
    """``doc`` with the containers on ``tokens`` copied, the one at the end included
    (copy-on-write)."""
    if not isinstance(doc, dict | list):
        return doc
    out: Any = dict(doc) if isinstance(doc, dict) else list(doc)
    if not tokens:
        return out
    head = tokens[0]
    if isinstance(out, dict) and head in out:
        out[head] = _copy_path(out[head], tokens[1:])
    elif isinstance(out, list) and head.isdigit() and int(head) < len(out):
        out[int(head)] = _copy_path(out[int(head)], tokens[1:])
    return out


def json_patch(original: Any, ops: list[Any]) -> Any:
    """RFC 6902 JSON patch (``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``) of
    ``original``, copy-on-write. A failed ``test`` raises :class:`JsonPatchTestFailed`; any
    other malformed operation :class:`InvalidRequestError`."""
    doc = original
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise InvalidRequestError(f"invalid JSON patch operation {op!r}")
        name, path = op["op"], op.get("path")
        tokens = _pointer(path)
        if name == "test":
            if _get(doc, tokens, path) != op.get("value"):
                raise JsonPatchTestFailed(f"testing value {path} failed: test failed")
            continue
        if name in ("move", "copy"):
            source = _pointer(op.get("from"))
            value = _get(doc, source, op.get("from"))
            if name == "move":
                doc = _remove(doc, source, op.get("from"))
            doc = _add(doc, tokens, path, value)
        elif name == "add":
            doc = _add(doc, tokens, path, op.get("value"))
        elif name == "remove":
            doc = _remove(doc, tokens, path)
        elif name == "replace":
            _get(doc, tokens, path)
            doc = _add(_remove(doc, tokens, path), tokens, path, op.get("value"))
        else:
            raise InvalidRequestError(f"unknown JSON patch operation {name!r}")
    return doc


def _add(doc: Any, tokens: list[str], path: object, value: Any) -> Any:
    if not tokens:
        return value
    doc = _copy_path(doc, tokens[:-1])
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise InvalidRequestError(f"JSON patch index {path!r} out of range")
    else:
        raise InvalidRequestError(f"JSON patch path {path!r} does not exist")
    return doc


def _remove(doc: Any, tokens: list[str], path: object) -> Any:
    if not tokens:
        raise InvalidRequestError("cannot remove the whole document")
    _get(doc, tokens, path)
    doc = _copy_path(doc, tokens[:-1])
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[int(last)]
    return doc


_IDENTITY = ("name", "namespace", "uid", "creationTimestamp", "resourceVersion")


def patch_object(
    cur: dict[str, Any], body: Any, flavour: str
) -> tuple[Any, list[tuple[str, object]]]:
    """(``cur`` with the patch ``body`` of ``flavour`` applied, the preconditions a merge
    patch's metadata carries: ``("uid", …)``, ``("rv", …)``). Strategic merge merges the
    lists under ``status`` by their merge keys (:func:`status_merge_keys`). Pure."""
    preconditions: list[tuple[str, object]] = []
    if flavour == "json":
        if not isinstance(body, list):
            raise InvalidRequestError("a JSON patch must be a list of operations")
        return json_patch(cur, body), preconditions
    if not isinstance(body, dict):
        raise InvalidRequestError("a merge patch must be a JSON object")
    meta = body.get("metadata")
    if isinstance(meta, dict):
        if "uid" in meta:
            preconditions.append(("uid", meta["uid"]))
        if "resourceVersion" in meta:
            preconditions.append(("rv", meta["resourceVersion"]))
    if flavour == "strategic":
        keys = {("status", *p): k for p, k in status_merge_keys(cur["kind"]).items()}
        return strategic_merge(cur, body, keys), preconditions
    merged = json_merge(cur, body)
    return (merged if isinstance(merged, dict) else {}), preconditions


def keep_identity(cur: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` with ``cur``'s kind, apiVersion and identity metadata (never patched). Pure."""
    meta = new.get("metadata")
    meta = dict(meta) if isinstance(meta, dict) else {}
    for field in _IDENTITY:
        if field in cur["metadata"]:
            meta[field] = cur["metadata"][field]
        else:
            meta.pop(field, None)
    out = {**new, "metadata": meta, "kind": cur["kind"]}
    if "apiVersion" in cur:
        out["apiVersion"] = cur["apiVersion"]
    return out
