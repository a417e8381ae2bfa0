"""Label and field selectors of the in-memory apiserver, parsed as the apiserver parses them.

* Label selector strings (``?labelSelector=``): comma-separated requirements, equality-based
  (``app=web``, ``app==web``, ``tier!=db``) or set-based (``env in (a,b)``, ``env notin (c)``,
  ``gpu`` — the key exists, ``!gpu`` — it does not).
* Field selector strings (``?fieldSelector=``): ``path=value``, ``path==value`` or
  ``path!=value`` on dotted paths such as ``metadata.name``, ``spec.nodeName`` or
  ``status.phase`` (a missing field compares as ``""``, as upstream's field sets do).
* ``LabelSelector`` objects (``spec.selector`` of a PodDisruptionBudget): ``matchLabels`` and
  ``matchExpressions`` with ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``. An empty selector
  matches everything.

Malformed selectors raise :class:`~kdispatch.InvalidRequestError` (400). Pure
module: no threads, no pykka, no kubernetes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from kdispatch.actors.model.errors import InvalidRequestError

Predicate = Callable[[Mapping[str, Any]], bool]
"""Whether an object matches."""

_SET = re.compile(r"^\s*(?P<key>[^\s!=,()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQ = re.compile(r"^\s*(?P<key>[^\s!=,()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=,()]*)\s*$")
_EXISTS = re.compile(r"^\s*(?P<neg>!?)\s*(?P<key>[^\s!=,()]+)\s*$")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


class _Requirement(NamedTuple):
    key: str
    op: str  # "in", "notin", "exists", "!exists"
    values: frozenset[str]

    def holds(self, labels: Mapping[str, Any]) -> bool:
        if self.op == "in":
            return labels.get(self.key) in self.values
        if self.op == "notin":
            return labels.get(self.key) not in self.values
        if self.op == "exists":
            return self.key in labels
        return self.key not in labels


def _requirement(part: str) -> _Requirement:
    if m := _SET.match(part):
        values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
        return _Requirement(m["key"], m["op"], values)
    if m := _EQ.match(part):
        return _Requirement(m["key"], "notin" if m["op"] == "!=" else "in", frozenset([m["value"]]))
    if m := _EXISTS.match(part):
        return _Requirement(m["key"], "!exists" if m["neg"] else "exists", frozenset())
    raise InvalidRequestError(f"unable to parse requirement {part.strip()!r}", status=400)


def parse_label_selector(selector: str | None) -> Predicate | None:
    """A predicate on an object's labels, or None for no selector (everything matches)."""
    if selector is None or not selector.strip():
        return None
    requirements = [_requirement(part) for part in _split(selector)]

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = _labels(obj)
        return all(r.holds(labels) for r in requirements)

    return matches


def _field(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for key in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(key)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(selector: str | None) -> Predicate | None:
    """A predicate on an object's fields, or None for no selector."""
    if selector is None or not selector.strip():
        return None
    checks: list[tuple[str, bool, str]] = []
    for part in selector.split(","):
        if not part.strip():
            continue
        m = _EQ.match(part)
        if m is None:
            raise InvalidRequestError(f"invalid field selector {part.strip()!r}", status=400)
        checks.append((m["key"], m["op"] != "!=", m["value"]))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((_field(obj, path) == value) is equal for path, equal, value in checks)

    return matches


def both(*predicates: Predicate | None) -> Predicate | None:
    """All of ``predicates`` (the Nones ignored); None when there are none."""
    active = [p for p in predicates if p is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]
    return lambda obj: all(p(obj) for p in active)


def selector_predicate(label_selector: str | None, field_selector: str | None) -> Predicate | None:
    """Both selectors of a list or a watch request (each None or a selector string) as one
    predicate; None when there are none."""
    for name, value in (("label_selector", label_selector), ("field_selector", field_selector)):
        if value is not None and not isinstance(value, str):
            raise InvalidRequestError(f"{name} must be a string, got {value!r}")
    return both(parse_label_selector(label_selector), parse_field_selector(field_selector))


def label_selector_matches(selector: object, labels: Mapping[str, Any]) -> bool:
    """Whether a ``LabelSelector`` object matches ``labels``. Raises for malformed ones."""
    if selector is None:
        return False  # a nil selector selects nothing (a PDB without one protects no pod)
    if not isinstance(selector, Mapping):
        raise InvalidRequestError("selector must be a LabelSelector object")
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise InvalidRequestError("selector.matchLabels must be an object")
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise InvalidRequestError("selector.matchExpressions must be a list")
    for expr in expressions:
        if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str):
            raise InvalidRequestError("every matchExpression needs a key")
        key, op, values = expr["key"], expr.get("operator"), expr.get("values") or []
        if op == "In":
            ok = labels.get(key) in values
        elif op == "NotIn":
            ok = labels.get(key) not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            raise InvalidRequestError(f"unknown matchExpressions operator {op!r}")
        if not ok:
            return False
    return True
