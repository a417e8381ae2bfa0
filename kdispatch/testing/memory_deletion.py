"""Deletion of an object that carries finalizers, as kube-apiserver's generic store does it.

A DELETE (or an eviction) of an object whose ``metadata.finalizers`` is not empty does not
remove it: the object is marked (``deletionTimestamp``, ``deletionGracePeriodSeconds``; one
``MODIFIED`` event) and stays, readable, patchable and refusing bindings, until its finalizers
are gone. A later DELETE changes nothing unless it shortens the grace period. A patch or update
that removes the last finalizer of an object marked with grace period 0 removes it (one
``DELETED`` event carrying the last stored state); a bound pod marked with a longer grace
period stays Terminating, waiting for a kubelet's DELETE with grace period 0. No finalizer can
be added to an object being deleted (422).

The grace period a pod is marked with: 0 when it is not bound (or has finished), else the
DELETE's ``gracePeriodSeconds``, else its ``spec.terminationGracePeriodSeconds`` (30 when
unset). Every other kind: 0.

Objects without finalizers are not this module's business: the emulator removes them at once
(docs/apiserver-differences.md).

Pure module: no threads, no locks; the in-memory apiserver calls it under its lock.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from kdispatch.actors.model.errors import InvalidRequestError

Json = dict[str, Any]

DEFAULT_GRACE_SECONDS = 30
DELETION_FIELDS = ("deletionTimestamp", "deletionGracePeriodSeconds")
"""Set only by a deletion: a patch or an update keeps the stored values."""


def held(obj: Json) -> bool:
    """Whether a deletion of ``obj`` must wait for its finalizers."""
    return bool(obj["metadata"].get("finalizers"))


def grace_seconds(obj: Json, requested: int | None) -> int:
    """The grace period a deletion (``requested``: the DELETE's, None when not given) marks
    ``obj`` with."""
    if obj.get("kind") != "Pod":
        return 0
    spec = obj.get("spec") or {}
    phase = (obj.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        return 0
    if requested is not None:
        return requested
    default = spec.get("terminationGracePeriodSeconds")
    return default if isinstance(default, int) and default >= 0 else DEFAULT_GRACE_SECONDS


def mark_deleting(obj: Json, requested: int | None, now: datetime | None = None) -> Json | None:
    """``obj`` marked for deletion, or None when a mark already there stands (a second DELETE
    only ever shortens the grace period)."""
    grace = grace_seconds(obj, requested)
    meta = obj["metadata"]
    current = meta.get("deletionGracePeriodSeconds")
    if meta.get("deletionTimestamp") and isinstance(current, int) and current <= grace:
        return None
    when = (now or datetime.now(UTC)) + timedelta(seconds=grace)
    marks = {
        "deletionTimestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "deletionGracePeriodSeconds": grace,
    }
    return {**obj, "metadata": {**meta, **marks}}


def keep_deletion_marks(cur: Json, new: Json) -> Json:
    """``new`` (a patched or replaced object) with ``cur``'s deletion marks, which only a
    deletion sets."""
    meta = {k: v for k, v in new["metadata"].items() if k not in DELETION_FIELDS}
    meta.update({k: cur["metadata"][k] for k in DELETION_FIELDS if k in cur["metadata"]})
    return {**new, "metadata": meta}


def check_finalizers(cur: Json, new: Json, qualified_kind: str) -> None:
    """422 when ``new`` adds a finalizer to ``cur`` while it is being deleted."""
    if not cur["metadata"].get("deletionTimestamp"):
        return
    before = set(cur["metadata"].get("finalizers") or [])
    added = [f for f in new["metadata"].get("finalizers") or [] if f not in before]
    if added:
        found = "[]string{" + ", ".join(json.dumps(f) for f in added) + "}"
        raise InvalidRequestError(
            f'{qualified_kind} "{cur["metadata"]["name"]}" is invalid: metadata.finalizers: '
            "Forbidden: no new finalizers can be added if the object is being deleted, "
            f"found new finalizers {found}"
        )


def finalized(cur: Json, new: Json) -> bool:
    """Whether writing ``new`` over ``cur`` ends ``cur``'s deletion: its last finalizer is
    removed and it was marked with grace period 0."""
    meta = cur["metadata"]
    return (
        bool(meta.get("deletionTimestamp"))
        and meta.get("deletionGracePeriodSeconds") == 0
        and held(cur)
        and not new["metadata"].get("finalizers")
    )
