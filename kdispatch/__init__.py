"""kdispatch: non-blocking, merged, rate-limited Kubernetes API calls, one actor per object.

Everything a program needs is importable from ``kdispatch``; the stand-ins for a cluster live in
:mod:`kdispatch.testing`. Every module the API reference does not show is internal. Logs
(loguru, name ``kdispatch``) are disabled on import: see :mod:`kdispatch.logs`.
"""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from loguru import logger

from ._lazy import lazy_exports
from .actors.facade.event_recorder import CallSubmitter, EventRecorder
from .actors.model.backend import ApiBackend, EvictionBackend, PatchType
from .actors.model.calls import UNSET, Call, CallTypeRegistry
from .actors.model.claim_calls import ClaimStatusPatch
from .actors.model.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RegistryConfig,
    RetryConfig,
    RuntimeConfig,
)
from .actors.model.errors import (
    ActorLimitExceeded,
    AlreadyExistsError,
    ApiConnectionError,
    ApiError,
    BadResponseError,
    CallCancelled,
    CallConflict,
    CallFailed,
    CallOutcomeError,
    CallStale,
    CallTypeRegistrationError,
    ConflictError,
    DependencyCycleError,
    DependencyFailed,
    DispatcherClosed,
    DisruptionBudgetError,
    ForbiddenError,
    GangPartiallyBound,
    GoneError,
    GroupClosedError,
    GroupFailed,
    GroupsNotSupported,
    InformerSyncTimeout,
    InvalidCallError,
    InvalidConfigError,
    InvalidInputError,
    InvalidObjectError,
    InvalidPrerequisiteError,
    InvalidRequestError,
    KdispatchError,
    LeadershipLost,
    NotFoundError,
    ObjectNotFound,
    Outcome,
    RequestDropped,
    RequestTimeoutError,
    ServerError,
    TooManyRequestsError,
    UnauthorizedError,
    UnknownCallTypeError,
    UnknownKindError,
)
from .actors.model.event_calls import EventRecord
from .actors.model.kinds import DEFAULT_KINDS, KindInfo, KindTable
from .actors.model.kinds import register as register_kind
from .actors.model.objects import (
    Obj,
    ObjectRef,
    as_object,
    get_path,
    is_newer,
    is_terminating,
    meta,
    pod_node_name,
    uid_of,
)
from .actors.runtime.ratelimit import TokenBucket

if TYPE_CHECKING:
    from .actors.engine.aio import NoEventLoopError
    from .actors.engine.gangs import Gang
    from .actors.engine.groups import CallGroup
    from .actors.engine.messages import CallFuture
    from .actors.engine.metrics import MetricsRegistryInUse
    from .actors.facade.dispatcher import Dispatcher
    from .actors.facade.dispatcher_like import DispatcherLike
    from .actors.facade.process import DispatcherProcessDied, ProcessDispatcher
    from .actors.model.call_types import BUILTIN_CALL_TYPES, default_call_types
    from .actors.model.eviction_calls import PodEviction
    from .actors.model.pod_calls import PodBinding, PodPreemption, PodStatusPatch, PreemptionOptions
    from .actors.model.podgroup_calls import PodGroupStatusPatch
    from .adapters.aio_informer import AioInformer
    from .adapters.discovery import register_from_discovery
    from .adapters.informer import ClientListWatch, Informer, ListWatch, WatchEvent, WatchStream
    from .adapters.kubernetes import KubernetesBackend
    from .adapters.leader import ClientLeaseClient, ElectionConfig, LeaseClient, LeaseElector
    from .adapters.listing import ObjectList
    from .adapters.transport import prepare_configuration
else:  # imported on first use: see kdispatch._lazy
    __getattr__ = lazy_exports(
        __name__,
        {
            ".actors.engine.aio": ("NoEventLoopError",),
            ".actors.model.call_types": ("BUILTIN_CALL_TYPES", "default_call_types"),
            ".actors.facade.dispatcher": ("Dispatcher",),
            ".actors.facade.dispatcher_like": ("DispatcherLike",),
            ".actors.model.eviction_calls": ("PodEviction",),
            ".actors.engine.groups": ("CallGroup",),
            ".actors.engine.gangs": ("Gang",),
            ".actors.engine.messages": ("CallFuture",),
            ".actors.engine.metrics": ("MetricsRegistryInUse",),
            ".actors.model.pod_calls": (
                "PodBinding",
                "PodPreemption",
                "PodStatusPatch",
                "PreemptionOptions",
            ),
            ".actors.model.podgroup_calls": ("PodGroupStatusPatch",),
            ".adapters.aio_informer": ("AioInformer",),
            ".adapters.discovery": ("register_from_discovery",),
            ".adapters.informer": (
                "ClientListWatch",
                "Informer",
                "ListWatch",
                "WatchEvent",
                "WatchStream",
            ),
            ".adapters.kubernetes": ("KubernetesBackend",),
            ".adapters.listing": ("ObjectList",),
            ".adapters.leader": (
                "ClientLeaseClient",
                "ElectionConfig",
                "LeaseClient",
                "LeaseElector",
            ),
            ".actors.facade.process": ("DispatcherProcessDied", "ProcessDispatcher"),
            ".adapters.transport": ("prepare_configuration",),
        },
    )

logger.disable("kdispatch")

try:
    __version__: str = version("kdispatch")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"

__all__ = [
    "BUILTIN_CALL_TYPES",
    "DEFAULT_KINDS",
    "UNSET",
    "ActorLimitExceeded",
    "AioInformer",
    "AlreadyExistsError",
    "ApiBackend",
    "ApiConnectionError",
    "ApiError",
    "BadResponseError",
    "Call",
    "CallCancelled",
    "CallConflict",
    "CallFailed",
    "CallFuture",
    "CallGroup",
    "CallOutcomeError",
    "CallStale",
    "CallSubmitter",
    "CallTypeRegistrationError",
    "CallTypeRegistry",
    "ClaimStatusPatch",
    "ClientLeaseClient",
    "ClientListWatch",
    "ConflictError",
    "DependencyCycleError",
    "DependencyFailed",
    "Dispatcher",
    "DispatcherClosed",
    "DispatcherConfig",
    "DispatcherLike",
    "DispatcherProcessDied",
    "DisruptionBudgetError",
    "ElectionConfig",
    "EventRecord",
    "EventRecorder",
    "EvictionBackend",
    "ExecutorConfig",
    "ForbiddenError",
    "Gang",
    "GangPartiallyBound",
    "GoneError",
    "GroupClosedError",
    "GroupFailed",
    "GroupsNotSupported",
    "Informer",
    "InformerSyncTimeout",
    "InvalidCallError",
    "InvalidConfigError",
    "InvalidInputError",
    "InvalidObjectError",
    "InvalidPrerequisiteError",
    "InvalidRequestError",
    "KdispatchError",
    "KindInfo",
    "KindTable",
    "KubernetesBackend",
    "LeadershipLost",
    "LeaseClient",
    "LeaseElector",
    "ListWatch",
    "MetricsRegistryInUse",
    "NoEventLoopError",
    "NotFoundError",
    "Obj",
    "ObjectList",
    "ObjectNotFound",
    "ObjectRef",
    "Outcome",
    "PatchType",
    "PodBinding",
    "PodEviction",
    "PodGroupStatusPatch",
    "PodPreemption",
    "PodStatusPatch",
    "PreemptionOptions",
    "ProcessDispatcher",
    "RateLimitConfig",
    "RegistryConfig",
    "RequestDropped",
    "RequestTimeoutError",
    "RetryConfig",
    "RuntimeConfig",
    "ServerError",
    "TokenBucket",
    "TooManyRequestsError",
    "UnauthorizedError",
    "UnknownCallTypeError",
    "UnknownKindError",
    "WatchEvent",
    "WatchStream",
    "as_object",
    "default_call_types",
    "get_path",
    "is_newer",
    "is_terminating",
    "meta",
    "pod_node_name",
    "prepare_configuration",
    "register_from_discovery",
    "register_kind",
    "uid_of",
]
