"""The built-in call types and the default registry.

=======================  =============  ====  ==========================  =============
call type                kind           lane  supersedes                  on a newer object
=======================  =============  ====  ==========================  =============
``pod_status_patch``     Pod            1                                 re-validate
``pod_binding``          Pod            2     ``pod_status_patch``        rebase
``pod_preemption``       Pod            3     everything (exclusive)      rebase
``claim_status_patch``   ResourceClaim  1                                 rebase
=======================  =============  ====  ==========================  =============

The lane (``relevance``) only orders objects in the executor when tokens are scarce;
supersession is declared per type. A status patch re-validates against a newer pod:
``PodScheduled=False`` never lands on a bound pod, nor over a ``PodScheduled=True`` its caller
had not seen (kubernetes#139602).

Users add their own call types (for any kind, e.g. a quota CRD) to a registry returned by
:func:`default_call_types` with :meth:`~kdispatch.actors.calls.CallTypeRegistry.register`.

Pure module: no threads, no pykka, no kubernetes.
"""

from __future__ import annotations

from typing import Final

from .calls import Call, CallTypeRegistry
from .claim_calls import ClaimStatusPatch
from .pod_calls import PodBinding, PodPreemption, PodStatusPatch

__all__ = ["BUILTIN_CALL_TYPES", "default_call_types"]

BUILTIN_CALL_TYPES: Final[tuple[type[Call], ...]] = (
    PodStatusPatch,
    PodBinding,
    PodPreemption,
    ClaimStatusPatch,
)


def default_call_types() -> CallTypeRegistry:
    """A fresh registry holding the four built-in call types (safe to extend; callable from any
    thread)."""
    return CallTypeRegistry(BUILTIN_CALL_TYPES)
