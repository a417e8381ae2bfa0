"""kdispatch: non-blocking, merged, rate-limited Kubernetes API calls, one actor per object.

The public names are re-exported here; everything else is internal.
"""

from loguru import logger

from actors.call_types import BUILTIN_CALL_TYPES, default_call_types
from actors.calls import UNSET, Call, CallTypeRegistry
from actors.claim_calls import ClaimStatusPatch
from actors.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RegistryConfig,
    RetryConfig,
    RuntimeConfig,
)
from actors.dispatcher import Dispatcher
from actors.errors import (
    ActorLimitExceeded,
    ApiError,
    CallCancelled,
    CallConflict,
    CallFailed,
    CallOutcomeError,
    DispatcherClosed,
    InvalidCallError,
    InvalidConfigError,
    InvalidInputError,
    InvalidObjectError,
    KdispatchError,
    ObjectNotFound,
    Outcome,
    UnknownCallTypeError,
)
from actors.objects import ObjectRef
from actors.pod_calls import PodBinding, PodPreemption, PodStatusPatch

logger.disable("actors")

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
    "CallTypeRegistry",
    "ClaimStatusPatch",
    "Dispatcher",
    "DispatcherClosed",
    "DispatcherConfig",
    "ExecutorConfig",
    "InvalidCallError",
    "InvalidConfigError",
    "InvalidInputError",
    "InvalidObjectError",
    "KdispatchError",
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
    "UnknownCallTypeError",
    "default_call_types",
]
