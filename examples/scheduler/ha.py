"""High availability for the main job: ``--leader-elect`` and a graceful SIGTERM.

With ``--leader-elect`` a replica first campaigns for the Lease (``--lease-namespace`` /
``--lease-name``, identity ``--identity``); only once it leads does it start its informers,
wait for them to sync and start scheduling, so a new leader rebuilds everything from
list+watch. The dispatcher's send gate is the elector's :meth:`~kdispatch.adapters.leader.
LeaseElector.may_send`; with ``--dispatcher-process`` the child's gate is the elector's send
deadline in shared memory (``ProcessDispatcher(..., leader=elector)``), checked before every
request as well. A lost lease revokes the dispatcher, in either form (every call not yet sent
resolves ``LeadershipLost``); the replica then ends its run (exit status 3), as kube-scheduler
exits, to be restarted as a fresh candidate.

SIGTERM (with or without leader election) ends the run gracefully: scheduling stops, pending
calls drain until the renew deadline, then the lease is released so a follower takes over at
its next retry instead of waiting out the lease. A SIGTERM that comes once the run is already
finishing (draining, verifying, writing its report) is only noted (``sigterm_while_finishing``
in the report): the finishing completes within its own drain timeout.

Every request carries ``User-Agent: kdispatch-scheduler/<identity>`` so the apiserver's audit
can tell the replicas apart.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from kubernetes import client as k8s

from examples.common import check_amounts
from kdispatch import (
    ApiBackend,
    ClientLeaseClient,
    ElectionConfig,
    InvalidInputError,
    KubernetesBackend,
    LeadershipLost,
    LeaseClient,
    LeaseElector,
)
from kdispatch.testing import InMemoryApiServer, MemoryLeaseClient

LOST_EXIT_STATUS = 3
"""Exit status of a replica whose run ended because it lost the lease."""


def default_identity() -> str:
    """``<hostname>_<pid>``, unique per process."""
    return f"{socket.gethostname()}_{os.getpid()}"


def user_agent(identity: str) -> str:
    """The ``User-Agent`` of a replica."""
    return f"kdispatch-scheduler/{identity}"


@dataclass(frozen=True, slots=True)
class LeaderElect:
    """``--leader-elect`` settings; defaults are kube-scheduler's (15 s / 10 s / 2 s)."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    lease_name: str = "kdispatch-scheduler"
    lease_namespace: str = "kube-system"
    identity: str = ""

    def __post_init__(self) -> None:
        check_amounts(self, "lease_duration", "renew_deadline", "retry_period")
        self.election()  # validates the names and the ordering of the durations

    def election(self) -> ElectionConfig:
        """The elector's configuration."""
        return ElectionConfig(
            self.lease_name,
            namespace=self.lease_namespace,
            identity=self.identity or default_identity(),
            lease_duration=self.lease_duration,
            renew_deadline=self.renew_deadline,
            retry_period=self.retry_period,
        )


def make_elector(
    settings: LeaderElect, backend: ApiBackend, on_lost: Callable[[LeadershipLost], None]
) -> LeaseElector:
    """An elector on the same apiserver as ``backend``. Caller thread."""
    cfg = settings.election()
    client: LeaseClient
    if isinstance(backend, InMemoryApiServer):
        client = MemoryLeaseClient(backend, writer=user_agent(cfg.identity))
    elif isinstance(backend, KubernetesBackend):
        api = k8s.ApiClient(backend.api_client.configuration)
        api.user_agent = user_agent(cfg.identity)
        client = ClientLeaseClient(api)
    else:
        raise InvalidInputError(f"no lease client for backend {type(backend).__name__}")
    return LeaseElector(client, cfg, on_lost=on_lost)


class Terminated(BaseException):
    """Raised on the main thread by SIGTERM: end the run gracefully (drain, release)."""


@dataclass
class _Sigterm:
    """SIGTERM handling of this process: whether the run is finishing, and whether a SIGTERM
    came while it was."""

    finishing: bool = False
    late: bool = False


_SIGTERM = _Sigterm()


def _on_sigterm(_sig: int, _frame: FrameType | None) -> None:
    """Main thread (signal handler). Before the run finishes: raise :class:`Terminated` (once;
    later SIGTERMs are ignored). While it finishes: only note it, so that draining, the check
    and the report complete (they end the run by themselves, within the drain timeout)."""
    if _SIGTERM.finishing:
        _SIGTERM.late = True
        return
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once is enough
    raise Terminated


def install_sigterm() -> None:
    """Main thread. Turn SIGTERM into :class:`Terminated` on the main thread until
    :func:`finishing` is called."""
    _SIGTERM.finishing = _SIGTERM.late = False
    signal.signal(signal.SIGTERM, _on_sigterm)


def running() -> None:
    """Any thread. A run starts: a SIGTERM raises :class:`Terminated` again (if
    :func:`install_sigterm` was called) until :func:`finishing`."""
    _SIGTERM.finishing = _SIGTERM.late = False


def finishing() -> None:
    """Any thread. The run is finishing: from now on a SIGTERM is only noted (see
    :func:`sigterm_while_finishing`), never raised into the shutdown. One attribute store, so
    a SIGTERM lands either before it (``Terminated``) or after it (noted)."""
    _SIGTERM.finishing = True


def sigterm_while_finishing() -> bool:
    """Any thread. Whether a SIGTERM came after :func:`finishing`."""
    return _SIGTERM.late
