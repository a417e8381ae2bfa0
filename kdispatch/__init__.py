"""kdispatch: non-blocking, merged, rate-limited Kubernetes API calls, one actor per object.

This module is the one public face: everything a first program needs is importable from
``kdispatch`` (the dispatcher, its call types and configuration, objects and kinds, the
official-client backend, informers, leader election, the dispatcher in its own process, and the
errors). The stand-ins for a cluster (the in-memory apiserver, object factories, the real
control plane for tests) live in :mod:`kdispatch.testing`. Every module the API reference does
not show is internal and may change.

Logs go through loguru under the one name ``kdispatch`` and are disabled on import, as a
library's should be: ``from loguru import logger; logger.enable("kdispatch")``, or
``kdispatch.logs.to_stdlib()`` to hand them to the standard ``logging`` module.
"""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from loguru import logger

from ._lazy import lazy_exports
from .actors.backend import ApiBackend, EvictionBackend, PatchType
from .actors.calls import UNSET, Call, CallTypeRegistry
from .actors.claim_calls import ClaimStatusPatch
from .actors.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RegistryConfig,
    RetryConfig,
    RuntimeConfig,
)
from .actors.errors import (
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
    RequestTimeoutError,
    ServerError,
    TooManyRequestsError,
    UnauthorizedError,
    UnknownCallTypeError,
    UnknownKindError,
)
from .actors.event_calls import EventRecord
from .actors.event_recorder import CallSubmitter, EventRecorder
from .actors.kinds import DEFAULT_KINDS, KindInfo, KindTable
from .actors.kinds import register as register_kind
from .actors.objects import (
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
from .actors.ratelimit import TokenBucket

if TYPE_CHECKING:
    from .actors.aio import NoEventLoopError
    from .actors.call_types import BUILTIN_CALL_TYPES, default_call_types
    from .actors.dispatcher import Dispatcher
    from .actors.dispatcher_like import DispatcherLike
    from .actors.eviction_calls import PodEviction
    from .actors.groups import CallGroup
    from .actors.messages import CallFuture
    from .actors.metrics import MetricsRegistryInUse
    from .actors.pod_calls import PodBinding, PodPreemption, PodStatusPatch, PreemptionOptions
    from .actors.podgroup_calls import PodGroupStatusPatch
    from .adapters.aio_informer import AioInformer
    from .adapters.discovery import register_from_discovery
    from .adapters.informer import ClientListWatch, Informer, ListWatch, WatchEvent, WatchStream
    from .adapters.kubernetes import KubernetesBackend
    from .adapters.leader import ClientLeaseClient, ElectionConfig, LeaseClient, LeaseElector
    from .adapters.listing import ObjectList
    from .adapters.process import DispatcherProcessDied, ProcessDispatcher
    from .adapters.transport import prepare_configuration
else:  # on first use: the dispatcher's runtime (pykka, asyncio, prometheus_client) and the
    # adapters (the Kubernetes client) cost more than pytest itself, which imports this package
    # for the envtest plugin in every run
    __getattr__ = lazy_exports(
        __name__,
        {
            ".actors.aio": ("NoEventLoopError",),
            ".actors.call_types": ("BUILTIN_CALL_TYPES", "default_call_types"),
            ".actors.dispatcher": ("Dispatcher",),
            ".actors.dispatcher_like": ("DispatcherLike",),
            ".actors.eviction_calls": ("PodEviction",),
            ".actors.groups": ("CallGroup",),
            ".actors.messages": ("CallFuture",),
            ".actors.metrics": ("MetricsRegistryInUse",),
            ".actors.pod_calls": (
                "PodBinding",
                "PodPreemption",
                "PodStatusPatch",
                "PreemptionOptions",
            ),
            ".actors.podgroup_calls": ("PodGroupStatusPatch",),
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
            ".adapters.process": ("DispatcherProcessDied", "ProcessDispatcher"),
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
