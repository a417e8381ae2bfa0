"""kdispatch: non-blocking, merged, rate-limited Kubernetes API calls, one actor per object.

``from kdispatch import Dispatcher, PodBinding, ...``: the public names of
:mod:`kdispatch.actors` are re-exported here. Backends, informers and the in-memory apiserver
live in :mod:`kdispatch.adapters`.

Logs go through loguru under the one name ``kdispatch`` and are disabled on import, as a
library's should be: ``from loguru import logger; logger.enable("kdispatch")``, or
``kdispatch.logs.to_stdlib()`` to hand them to the standard ``logging`` module.
"""

from importlib.metadata import PackageNotFoundError, version

from loguru import logger

from .actors import (
    BUILTIN_CALL_TYPES,
    UNSET,
    ActorLimitExceeded,
    ApiError,
    Call,
    CallCancelled,
    CallConflict,
    CallFailed,
    CallOutcomeError,
    CallStale,
    CallTypeRegistry,
    ClaimStatusPatch,
    Dispatcher,
    DispatcherClosed,
    DispatcherConfig,
    ExecutorConfig,
    ForbiddenError,
    InvalidCallError,
    InvalidConfigError,
    InvalidInputError,
    InvalidObjectError,
    KdispatchError,
    LeadershipLost,
    MetricsRegistryInUse,
    NoEventLoopError,
    ObjectNotFound,
    ObjectRef,
    Outcome,
    PodBinding,
    PodPreemption,
    PodStatusPatch,
    RateLimitConfig,
    RegistryConfig,
    RetryConfig,
    RuntimeConfig,
    UnauthorizedError,
    UnknownCallTypeError,
    as_object,
    default_call_types,
)

logger.disable("kdispatch")

try:
    __version__: str = version("kdispatch")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"

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
    "__version__",
    "as_object",
    "default_call_types",
]
