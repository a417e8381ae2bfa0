"""The eviction call: ``pods/eviction`` (policy/v1), which honours PodDisruptionBudgets
(docs/call-types.md, "Eviction"). Pure module: every method but ``send`` runs on the calling
thread and never blocks; ``send`` runs on an executor worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Self, cast

from loguru import logger

from .backend import ApiBackend, EvictionBackend, check_grace_period, missing_methods
from .calls import check_target
from .errors import InvalidCallError, InvalidRequestError, NotFoundError
from .objects import POD, Obj, ObjectRef, as_object
from .pod_calls import DeletionRules

__all__ = ["PodEviction"]


@dataclass(frozen=True, slots=True)
class PodEviction(DeletionRules):
    """Evict a pod through ``pods/eviction`` with a UID precondition. Build with :meth:`for_pod`.
    Exclusive: it cancels every other pending call of the pod. NotFound is success; a PDB
    refusal is retried within the retry budget. The backend must be an
    :class:`~kdispatch.EvictionBackend`; with any other the call fails ``CallFailed``."""

    call_type = "pod_eviction"
    kind = POD
    relevance = 3  # the lane of deletions, shared with preemption
    exclusive = True
    reads_object: ClassVar[bool] = False  # the request only carries the UID precondition

    ref: ObjectRef
    grace_period_seconds: int | None = None
    basis: Obj | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_target(self)
        check_grace_period(self.grace_period_seconds, InvalidCallError)

    @classmethod
    def for_pod(cls, pod: object, *, grace_period_seconds: int | None = None) -> Self:
        """An eviction of ``pod`` (also its basis; a dict, any Mapping or an official-client
        model). Raises ``InvalidObjectError`` / ``InvalidCallError``."""
        pod = as_object(pod)
        return cls(ObjectRef.of(pod, POD), grace_period_seconds, basis=pod)

    def merge(self, older: Self) -> Self:
        """A newer eviction of the same pod wins; its grace period, or the older one's."""
        if self.grace_period_seconds is None and older.grace_period_seconds is not None:
            return type(self)(self.ref, older.grace_period_seconds, basis=self.basis)
        return self

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        """Create the eviction (UID precondition). NotFound is success; a PDB refusal raises
        ``DisruptionBudgetError`` for the executor to retry. Executor worker thread."""
        del obj
        if missing_methods(backend, EvictionBackend):
            raise InvalidRequestError(
                f"{type(backend).__name__} cannot evict pods (it has no evict method)"
            )
        ref = self.ref
        try:
            cast(EvictionBackend, backend).evict(
                ref.namespace, ref.name, uid=ref.uid, grace_period_seconds=self.grace_period_seconds
            )
        except NotFoundError:
            logger.bind(uid=ref.uid, call_type=self.call_type).debug("evicted pod already gone")
        return None
