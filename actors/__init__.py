"""kdispatch: non-blocking, merged, rate-limited Kubernetes API calls, one actor per object.

The public names are re-exported here; everything else is internal.
"""

if __name__ != "kdispatch.actors":  # one identity: actors/ is kdispatch.actors
    raise ImportError(
        f"{__name__!r} is kdispatch's actors/ folder imported under a second name: "
        "import kdispatch.actors (or just kdispatch) instead"
    )


from .aio import NoEventLoopError
from .call_types import BUILTIN_CALL_TYPES, default_call_types
from .calls import UNSET, Call, CallTypeRegistry
from .claim_calls import ClaimStatusPatch
from .config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RegistryConfig,
    RetryConfig,
    RuntimeConfig,
)
from .dispatcher import Dispatcher
from .errors import (
    ActorLimitExceeded,
    ApiError,
    CallCancelled,
    CallConflict,
    CallFailed,
    CallOutcomeError,
    CallStale,
    DispatcherClosed,
    DisruptionBudgetError,
    ForbiddenError,
    InvalidCallError,
    InvalidConfigError,
    InvalidInputError,
    InvalidObjectError,
    KdispatchError,
    LeadershipLost,
    ObjectNotFound,
    Outcome,
    UnauthorizedError,
    UnknownCallTypeError,
    UnknownKindError,
)
from .eviction_calls import PodEviction
from .kinds import KindInfo, KindTable
from .kinds import register as register_kind
from .metrics import MetricsRegistryInUse
from .objects import ObjectRef, as_object
from .pod_calls import PodBinding, PodPreemption, PodStatusPatch

__all__ = [
    "BUILTIN_CALL_TYPES",
    "UNSET",
    "ActorLimitExceeded",
    "ApiError",
    "Call",
    "CallCancelled",
    "CallConflict",
    "CallFailed",
    "CallOutcomeError",
    "CallStale",
    "CallTypeRegistry",
    "ClaimStatusPatch",
    "Dispatcher",
    "DispatcherClosed",
    "DispatcherConfig",
    "DisruptionBudgetError",
    "ExecutorConfig",
    "ForbiddenError",
    "InvalidCallError",
    "InvalidConfigError",
    "InvalidInputError",
    "InvalidObjectError",
    "KdispatchError",
    "KindInfo",
    "KindTable",
    "LeadershipLost",
    "MetricsRegistryInUse",
    "NoEventLoopError",
    "ObjectNotFound",
    "ObjectRef",
    "Outcome",
    "PodBinding",
    "PodEviction",
    "PodPreemption",
    "PodStatusPatch",
    "RateLimitConfig",
    "RegistryConfig",
    "RetryConfig",
    "RuntimeConfig",
    "UnauthorizedError",
    "UnknownCallTypeError",
    "UnknownKindError",
    "as_object",
    "default_call_types",
    "register_kind",
]
