"""ResourceClaims (DRA): the claims the informer shows, and the allocation the scheduler writes.

The scheduler allocates one device per claim (``example.com/gpu`` devices named ``gpu-<i>`` on
each node, see :mod:`examples.scheduler.cache`) and writes the allocation plus a reservation for
the pod into the claim's status *before* binding the pod, as upstream's DRA plugin does in
PreBind. Thread-safe store; pure helpers.
"""

from __future__ import annotations

import threading
from typing import Any, Final

from kdispatch import Obj, get_path, meta

DRIVER: Final = "gpu.example.com"
REQUEST: Final = "device"


def claim_key(obj: Obj) -> str:
    """``namespace/name`` of a claim object."""
    m = meta(obj)
    return f"{m.get('namespace', 'default')}/{m.get('name')}"


def allocation_for(node: str, device: str) -> dict[str, Any]:
    """The ``status.allocation`` of a claim given ``device`` on ``node``."""
    return {
        "devices": {
            "results": [{"request": REQUEST, "driver": DRIVER, "pool": node, "device": device}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def allocated_device(obj: Obj | None) -> tuple[str, str] | None:
    """``(node, device)`` of an allocated claim object, or None."""
    results = get_path(obj, "status", "allocation", "devices", "results")
    if not isinstance(results, list) or not results or not isinstance(results[0], dict):
        return None
    node, device = results[0].get("pool"), results[0].get("device")
    if isinstance(node, str) and isinstance(device, str):
        return node, device
    return None


def reserved_uids(obj: Obj | None) -> set[str]:
    """Consumer UIDs in ``status.reservedFor``."""
    entries = get_path(obj, "status", "reservedFor")
    if not isinstance(entries, list):
        return set()
    return {e["uid"] for e in entries if isinstance(e, dict) and isinstance(e.get("uid"), str)}


class ClaimStore:
    """Newest observed claim per ``namespace/name``. Informer thread writes, any thread reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claims: dict[str, Obj] = {}

    def put(self, obj: Obj) -> None:
        """Informer thread."""
        with self._lock:
            self._claims[claim_key(obj)] = obj

    def delete(self, obj: Obj) -> None:
        """Informer thread."""
        with self._lock:
            self._claims.pop(claim_key(obj), None)

    def get(self, key: str) -> Obj | None:
        """Any thread."""
        return self._claims.get(key)

    def __len__(self) -> int:
        return len(self._claims)
