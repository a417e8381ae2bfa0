"""The built-in call types and the default registry (users register their own in it). Pure."""

from __future__ import annotations

from typing import Final

from .calls import Call, CallTypeRegistry
from .claim_calls import ClaimStatusPatch
from .event_calls import EventRecord
from .eviction_calls import PodEviction
from .pod_calls import PodBinding, PodPreemption, PodStatusPatch
from .podgroup_calls import PodGroupStatusPatch

__all__ = ["BUILTIN_CALL_TYPES", "default_call_types"]

BUILTIN_CALL_TYPES: Final[tuple[type[Call], ...]] = (
    PodStatusPatch,
    PodBinding,
    PodPreemption,
    ClaimStatusPatch,
    PodEviction,
    EventRecord,
    PodGroupStatusPatch,
)
"""The call types every dispatcher knows (what :func:`default_call_types` registers)."""


def default_call_types() -> CallTypeRegistry:
    """A fresh registry holding the built-in call types (safe to extend; callable from any
    thread)."""
    return CallTypeRegistry(BUILTIN_CALL_TYPES)
