"""kdispatch: non-blocking, merged, rate-limited Kubernetes API calls, one actor per object.

The public names are re-exported here; everything else is internal.
"""

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
)
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
    "ExecutorConfig",
    "ForbiddenError",
    "InvalidCallError",
    "InvalidConfigError",
    "InvalidInputError",
    "InvalidObjectError",
    "KdispatchError",
    "LeadershipLost",
    "MetricsRegistryInUse",
    "NoEventLoopError",
    "ObjectNotFound",
    "ObjectRef",
    "Outcome",
    "PodBinding",
    "PodPreemption",
    "PodStatusPatch",
    "RateLimitConfig",
    "RegistryConfig",
    "RetryConfig",
    "RuntimeConfig",
    "UnauthorizedError",
    "UnknownCallTypeError",
    "as_object",
    "default_call_types",
]
