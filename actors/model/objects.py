"""Kubernetes objects as the JSON dicts the apiserver speaks, treated as immutable (a derived
object copies the path it changes: :func:`with_path`), and their identity. :func:`as_object`
turns what users hold into that form at the boundary (docs/clients.md). Pure module.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from .errors import InvalidObjectError

Obj = Mapping[str, Any]
"""A Kubernetes object in its JSON form. Never mutated once shared."""

POD = "Pod"
RESOURCE_CLAIM = "ResourceClaim"
POD_GROUP = "PodGroup"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_UID = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.:]{0,127}$")
_KIND = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$")


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, with exact dicts first: the check against the ABC is
    about ten times slower, and it runs several times per call on the hot path."""
    return type(value) is dict or isinstance(value, Mapping)


_NOT_A_COLLECTION = (Mapping, str, bytes)
"""Iterables that are one value, not a collection of items (a type tuple built once)."""


def is_collection(value: object) -> TypeGuard[Iterable[Any]]:
    """True for an iterable of items (a list, tuple, set, generator ...), False for anything
    else, a mapping, str or bytes included: they iterate, but are one value. Exact lists and
    tuples first (the ABC checks cost ten times as much)."""
    return (
        type(value) is list
        or type(value) is tuple
        or (not isinstance(value, _NOT_A_COLLECTION) and isinstance(value, Iterable))
    )


def as_object(obj: object) -> dict[str, Any]:
    """The JSON form of ``obj``, the form every object takes inside kdispatch. Any thread; pure.

    A plain ``dict`` as it is (treated as immutable from now on); any other ``Mapping`` copied
    into plain dicts and lists; an official-client model (``V1Pod`` ...) as
    ``ApiClient().sanitize_for_serialization(model)`` would put it on the wire; another client's
    object from its ``.raw`` mapping (kr8s) or ``to_dict()`` (lightkube). No client is imported.
    Raises :class:`InvalidObjectError` for anything else, naming where in the object it failed.
    """
    if type(obj) is dict:
        return obj
    if is_mapping(obj) or _is_model(obj):
        out = _json(obj, "object")
    else:
        data = _foreign(obj, "object")
        if data is None:
            raise InvalidObjectError(
                "object must be a mapping (a dict in the apiserver's JSON form), an official "
                "Kubernetes client model, or an object with a .raw mapping (kr8s) or a "
                f"to_dict() method (lightkube), got {type(obj).__name__}"
            )
        out = _json(data, "object")
    if not isinstance(out, dict):
        raise InvalidObjectError(f"object: {type(obj).__name__} is not a JSON object")
    return out


def _is_model(value: object) -> bool:
    return isinstance(getattr(value, "openapi_types", None), dict) and isinstance(
        getattr(value, "attribute_map", None), dict
    )


def _foreign(value: object, where: str) -> Mapping[str, Any] | None:
    """The JSON form another client's object carries: its ``.raw`` mapping (kr8s) or its
    ``to_dict()`` (lightkube); None when it has neither."""
    raw = getattr(value, "raw", None)
    if raw is not None and is_mapping(raw):
        return raw
    to_dict = getattr(value, "to_dict", None)
    if not callable(to_dict):
        return None
    try:
        data = to_dict()
    except Exception as exc:
        raise InvalidObjectError(
            f"{where}: {type(value).__name__}.to_dict() raised {exc!r}"
        ) from exc
    if not is_mapping(data):
        raise InvalidObjectError(
            f"{where}: {type(value).__name__}.to_dict() returned a {type(data).__name__}, "
            "not a mapping"
        )
    return data


# Type tuples built once: ``isinstance(v, A | B)`` builds a union object on every call.
_SCALARS = (str, int, float, bool, bytes)
_SEQUENCES = (list, tuple)
_DATES = (datetime.datetime, datetime.date)
_AS_STRING = (decimal.Decimal, uuid.UUID)


def _json(value: Any, where: str) -> Any:
    """``sanitize_for_serialization`` without the client: the same rules, the same output."""
    if value is None or isinstance(value, _SCALARS):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {key: _json(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, _SEQUENCES):
        return [_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, _DATES):
        return value.isoformat()
    if isinstance(value, _AS_STRING):
        return str(value)
    if _is_model(value):
        names: Mapping[str, str] = value.attribute_map
        out: dict[str, Any] = {}
        for attr in value.openapi_types:
            item = getattr(value, attr, None)
            if item is not None:
                key = names.get(attr, attr)
                out[key] = _json(item, f"{where}.{key}")
        return out
    secret = getattr(value, "get_secret_value", None)  # pydantic's SecretStr
    if callable(secret):
        return secret()
    foreign = _foreign(value, where)
    if foreign is not None:
        return _json(foreign, where)
    raise InvalidObjectError(f"{where}: cannot convert a {type(value).__name__} to JSON")


def check_json(value: object, where: str) -> Any:
    """A deep copy of ``value`` as plain JSON: dicts with str keys, lists (from lists or
    tuples), str, int, finite float, bool and None. Anything else (a set, a non-str key, NaN,
    an object) raises :class:`InvalidObjectError` naming where in ``value`` it is, instead of
    failing when the value is serialized or being rewritten on the way (``{1: x}`` stored as
    ``{"1": x}``)."""
    if value is None or isinstance(value, str | int):  # bool is an int
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        raise InvalidObjectError(f"{where}: {value!r} is not a JSON number")
    if is_mapping(value):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidObjectError(f"{where}: key {key!r} is not a str")
            out[key] = check_json(item, f"{where}.{key}")
        return out
    if isinstance(value, _SEQUENCES):
        return [check_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise InvalidObjectError(f"{where}: {type(value).__name__!r} is not a JSON type")


def is_dns_subdomain(value: object) -> TypeGuard[str]:
    """True for a valid RFC 1123 subdomain (object and node names): ≤253 chars, lowercase."""
    return isinstance(value, str) and 0 < len(value) <= 253 and bool(_DNS_SUBDOMAIN.match(value))


def is_dns_label(value: object) -> TypeGuard[str]:
    """True for a valid RFC 1123 label (namespaces): ≤63 chars, lowercase alphanumerics and '-'."""
    return isinstance(value, str) and 0 < len(value) <= 63 and bool(_DNS_LABEL.match(value))


def is_name_part(value: str) -> bool:
    """True when ``value`` is made as the name part of a qualified name (a condition type, an
    Event's reporting controller): alphanumerics, '-', '_' or '.', starting and ending with an
    alphanumeric. Its length is the caller's rule."""
    return bool(_NAME_PART.match(value))


def qualified_name_problem(value: str) -> str | None:
    """What apimachinery's ``IsQualifiedName`` refuses in ``value`` (a condition type, an
    Event's reporting controller), or None: an optional DNS-subdomain prefix and ``/``, then a
    name part (:func:`is_name_part`) of 1-63 characters."""
    parts = value.split("/")
    if len(parts) > 2:
        return "a qualified name has at most one '/'"
    if len(parts) == 2 and not is_dns_subdomain(parts[0]):
        return "the prefix of a qualified name must be a DNS subdomain"
    name = parts[-1]
    if not 0 < len(name) <= 63 or not is_name_part(name):
        return (
            "the name part of a qualified name must be 1-63 characters: alphanumerics, '-', "
            "'_' or '.', starting and ending with an alphanumeric"
        )
    return None


def check_uid(uid: object) -> str:
    """Return ``uid`` if it is a plausible object UID, else raise :class:`InvalidObjectError`
    (a short message: an object given where its UID belongs is named by its type, not
    printed)."""
    if isinstance(uid, str) and _UID.match(uid):
        return uid
    if isinstance(uid, str | int | float) or uid is None:
        shown = repr(uid)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise InvalidObjectError(f"invalid uid {shown}: want 1-128 chars of [A-Za-z0-9-_.:]")
    raise InvalidObjectError(
        f"invalid uid: got a {type(uid).__name__}, want a string (an object's metadata.uid: "
        "kdispatch.uid_of(obj))"
    )


def _checked(value: object, what: str, valid: Callable[[object], TypeGuard[str]], want: str) -> str:
    if not valid(value):
        raise InvalidObjectError(f"invalid {what} {value!r}: want {want}")
    return value


def check_subdomain(value: object, what: str = "name") -> str:
    """Return ``value`` if it is a valid RFC 1123 subdomain (object names), else raise
    :class:`InvalidObjectError` naming it ``what``."""
    return _checked(value, what, is_dns_subdomain, "an RFC 1123 subdomain")


def check_label(value: object, what: str = "namespace") -> str:
    """Return ``value`` if it is a valid RFC 1123 label (namespaces), else raise
    :class:`InvalidObjectError` naming it ``what``."""
    return _checked(value, what, is_dns_label, "an RFC 1123 label")


def check_node_name(node: object) -> str:
    """Return ``node`` if it is a valid node name, else raise :class:`InvalidObjectError`."""
    if is_dns_subdomain(node):  # the binding's submit path: no extra call when valid
        return node
    return check_subdomain(node, "node name")


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Identity of one object. Equality includes the UID: a pod deleted and re-created under the
    same name is a different object."""

    kind: str
    namespace: str
    name: str
    uid: str

    def __post_init__(self) -> None:
        """Validate the fields: :class:`InvalidObjectError` for any wrong one (a field that is
        not a str included)."""
        kind, namespace, name = self.kind, self.namespace, self.name
        if not isinstance(kind, str) or not _KIND.match(kind):
            raise InvalidObjectError(f"invalid kind {kind!r}")
        if not is_dns_label(namespace):  # checked inline first: no extra call when valid
            check_label(namespace)
        if not is_dns_subdomain(name):
            check_subdomain(name)
        check_uid(self.uid)

    @classmethod
    def of(cls, obj: object, kind: str | None = None) -> ObjectRef:
        """Identity of ``obj`` (a dict, any ``Mapping`` or an official-client model: see
        :func:`as_object`). ``kind`` defaults to ``obj['kind']``; when both are given they must
        agree. Raises :class:`InvalidObjectError` for anything malformed."""
        if type(obj) is not dict:  # most objects are dicts already: no extra call
            obj = as_object(obj)
        meta = obj.get("metadata")
        if type(meta) is not dict and not is_mapping(meta):
            raise InvalidObjectError("object has no metadata")
        obj_kind = obj.get("kind")
        if kind is None:
            if not isinstance(obj_kind, str):
                raise InvalidObjectError("object has no kind")
            kind = obj_kind
        elif obj_kind is not None and obj_kind != kind:
            raise InvalidObjectError(f"expected a {kind}, got a {obj_kind!r}")
        # the fields as found: __post_init__ validates them
        return cls(
            kind, meta.get("namespace", "default"), meta.get("name", ""), meta.get("uid", "")
        )

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} ({self.uid})"

    def __reduce__(self) -> tuple[type[ObjectRef], tuple[str, str, str, str]]:
        """Pickled as its four fields (``ProcessDispatcher`` sends refs to its child process).
        Any thread."""
        return (type(self), (self.kind, self.namespace, self.name, self.uid))


def meta(obj: Obj) -> Mapping[str, Any]:
    """``obj['metadata']`` or an empty mapping."""
    m = obj.get("metadata")
    return m if type(m) is dict or is_mapping(m) else {}


def uid_of(obj: Obj) -> str:
    """``metadata.uid``, validated."""
    return check_uid(meta(obj).get("uid"))


def resource_version(obj: Obj | None) -> str | None:
    """``metadata.resourceVersion`` or None."""
    if obj is None:
        return None
    m = obj.get("metadata")
    rv = m.get("resourceVersion") if type(m) is dict else meta(obj).get("resourceVersion")
    return rv if isinstance(rv, str) and rv else None


def is_newer(candidate: Obj, current: Obj | None, *, strict: bool = False) -> bool:
    """Whether ``candidate`` should replace ``current`` as the newest observed state: see
    :func:`rv_is_newer` (``current`` None: nothing observed yet, so True)."""
    if current is None:
        return True
    return rv_is_newer(resource_version(candidate), resource_version(current), strict=strict)


def rv_is_newer(new: str | None, current: str | None, *, strict: bool = False) -> bool:
    """Whether an object at resourceVersion ``new`` should replace one at ``current`` (None:
    absent or empty, which never holds an object back). Compared as integers when both are
    numeric, otherwise the later arrival is newer. ``strict``: an equal one is not newer.
    """
    if new is None or current is None:
        return True
    if new.isdecimal() and current.isdecimal():
        return int(new) > int(current) if strict else int(new) >= int(current)
    return not strict or new != current


def uid_and_version(obj: Obj) -> tuple[Any, str | None]:
    """``metadata.uid`` (as found, not validated) and ``metadata.resourceVersion`` (None when
    absent or empty), from one lookup of the metadata."""
    m = obj.get("metadata")
    if type(m) is not dict and not is_mapping(m):
        return None, None
    rv = m.get("resourceVersion")
    return m.get("uid"), rv if isinstance(rv, str) and rv else None


def get_path(obj: Obj | None, *path: str) -> Any:
    """``obj[path[0]][path[1]]...`` or None when any step is missing."""
    cur: Any = obj
    for key in path:
        if type(cur) is dict:  # the usual case first
            cur = cur.get(key)
        elif cur is None or not is_mapping(cur):
            return None
        else:
            cur = cur.get(key)
    return cur


def with_path(obj: Obj, path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A shallow copy of ``obj`` with ``obj[path...] = value``; copies only the dicts on the path.
    ``value`` of ``DELETE`` removes the key."""
    out = dict(obj)
    if len(path) == 1:
        if value is DELETE:
            out.pop(path[0], None)
        else:
            out[path[0]] = value
        return out
    child = out.get(path[0])
    out[path[0]] = with_path(child if is_mapping(child) else {}, path[1:], value)
    return out


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE: Any = _Delete()
"""Sentinel for :func:`with_path`: remove the key."""


def pod_node_name(pod: Obj | None) -> str | None:
    """``spec.nodeName`` of a pod, or None when unbound."""
    spec = pod.get("spec") if type(pod) is dict else get_path(pod, "spec")
    node = spec.get("nodeName") if type(spec) is dict else get_path(spec, "nodeName")
    return node if type(node) is str and node else None


def is_terminating(obj: Obj | None) -> bool:
    """Whether the object has a deletionTimestamp."""
    return bool(get_path(obj, "metadata", "deletionTimestamp"))
