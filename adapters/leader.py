"""Leader election on a ``coordination.k8s.io/v1`` Lease, fenced to the dispatcher's sends.

The protocol and Lease fields are client-go's (``tools/leaderelection``), so this elector and
the official client's ``LeaseLock`` see each other's leases: a candidate takes the Lease when it
is free, or when its record has not changed for ``leaseDurationSeconds`` on its own monotonic
clock; every write carries the observed ``resourceVersion``. The fence, the guarantees and
limits, and why not ``kubernetes.leaderelection``: the "High availability" guide
(``docs/high-availability.md``).

Threads: :meth:`~LeaseElector.start` runs the election loop on ``kdispatch-leader-<lease>`` and
the deadline watchdog on ``kdispatch-leader-watchdog-<lease>``; :meth:`~LeaseElector.may_send`
is called by executor workers; every other method may be called from any thread. Tests drive
:meth:`~LeaseElector.step` and :meth:`~LeaseElector.check_deadline` with a fake clock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes import client as k8s
from loguru import logger
from prometheus_client import CollectorRegistry, Counter, Gauge

from kdispatch.actors.model.config import check_timeout
from kdispatch.actors.model.errors import (
    AlreadyExistsError,
    ApiError,
    ConflictError,
    InvalidConfigError,
    InvalidInputError,
    LeadershipLost,
    NotFoundError,
)
from kdispatch.actors.model.objects import is_dns_label, is_dns_subdomain

from .transport import positive_seconds, read_json_object, translate_errors

__all__ = [
    "ClientLeaseClient",
    "ElectionConfig",
    "LeaderMetrics",
    "LeaseClient",
    "LeaseElector",
]

Json = dict[str, Any]


# --------------------------------------------------------------------------- lease access


class LeaseClient(Protocol):
    """Reads and writes one kind of object: Leases. Raises ``ApiError`` subclasses; ``timeout``
    bounds each request in seconds. Called on the elector's thread."""

    def get(self, namespace: str, name: str, *, timeout: float) -> Json | None:
        """The Lease, or None if there is none."""
        ...

    def create(self, namespace: str, lease: Json, *, timeout: float) -> Json:
        """Create it (``AlreadyExistsError`` if someone was faster)."""
        ...

    def update(self, namespace: str, name: str, lease: Json, *, timeout: float) -> Json:
        """Replace it; its ``metadata.resourceVersion`` is a precondition (``ConflictError``)."""
        ...


class ClientLeaseClient:
    """Leases through the official client's ``CoordinationV1Api`` on an injected ``ApiClient``
    (raw JSON replies, a timeout on every request, errors as ``ApiError`` subclasses)."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        if not isinstance(api_client, k8s.ApiClient):
            raise InvalidInputError(
                f"api_client must be a kubernetes ApiClient, got {api_client!r}"
            )
        self._api: Any = k8s.CoordinationV1Api(api_client)

    def get(self, namespace: str, name: str, *, timeout: float) -> Json | None:
        what = f"get lease {namespace}/{name}"
        read = self._api.read_namespaced_lease
        try:
            return self._call(what, read, name, namespace, timeout=timeout)
        except NotFoundError:
            return None

    def create(self, namespace: str, lease: Json, *, timeout: float) -> Json:
        what = f"create lease {namespace}"
        create = self._api.create_namespaced_lease
        return self._call(what, create, namespace, lease, timeout=timeout)

    def update(self, namespace: str, name: str, lease: Json, *, timeout: float) -> Json:
        what = f"update lease {namespace}/{name}"
        replace = self._api.replace_namespaced_lease
        return self._call(what, replace, name, namespace, lease, timeout=timeout)

    @staticmethod
    def _call(what: str, method: Any, *args: object, timeout: float) -> Json:
        """One request of the ``CoordinationV1Api``, its raw reply read within ``timeout`` in
        all and decoded. Calling thread."""
        deadline = time.monotonic() + timeout
        with translate_errors(what):
            resp = method(*args, _preload_content=False, _request_timeout=timeout)
            return read_json_object(resp, what, deadline)


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    """One election. Defaults are kube-scheduler's: a 15 s lease, renewed every 2 s, given up
    (and the send gate closed) 10 s after the last successful renew.

    ``lease_duration`` must exceed ``renew_deadline``, which must exceed ``retry_period``;
    ``leaseDurationSeconds`` on the Lease is ``lease_duration`` rounded up to whole seconds.
    """

    name: str
    namespace: str = "kube-system"
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not is_dns_subdomain(self.name):
            raise InvalidConfigError(f"invalid lease name {self.name!r}")
        if not is_dns_label(self.namespace):
            raise InvalidConfigError(f"invalid lease namespace {self.namespace!r}")
        if not isinstance(self.identity, str) or not self.identity:
            raise InvalidConfigError("identity must be a non-empty string")
        lease = positive_seconds(self.lease_duration, "lease_duration")
        renew = positive_seconds(self.renew_deadline, "renew_deadline")
        retry = positive_seconds(self.retry_period, "retry_period")
        if not lease > renew:
            raise InvalidConfigError("lease_duration must be greater than renew_deadline")
        if not renew > retry:
            raise InvalidConfigError("renew_deadline must be greater than retry_period")

    @property
    def lease_seconds(self) -> int:
        """``spec.leaseDurationSeconds`` written on the Lease."""
        return max(1, math.ceil(self.lease_duration))


class LeaderMetrics:
    """``kdispatch_leader_is_leader{lease}`` (1 while this replica leads) and
    ``kdispatch_leader_transitions_total{lease,to}`` (``to`` = ``leader`` / ``follower``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.is_leader = Gauge(
            "kdispatch_leader_is_leader",
            "1 while this replica holds the leader lease",
            ["lease"],
            registry=self.registry,
        )
        self.transitions = Counter(
            "kdispatch_leader_transitions_total",
            "Times this replica became leader or stopped leading",
            ["lease", "to"],
            registry=self.registry,
        )


def _micro_time(wall: float) -> str:
    """A Kubernetes ``MicroTime``."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- the elector


class LeaseElector:
    """Campaigns for one Lease and fences sends to it (see the module docstring).

    ``on_lost`` is called exactly once, with the :class:`LeadershipLost`, on whichever thread
    noticed the loss (election loop, watchdog, an executor worker in :meth:`may_send`, or any
    thread that reads :attr:`is_leader` or calls :meth:`check_deadline`); it must not block.
    ``client`` is a :class:`LeaseClient`. ``clock`` is monotonic seconds (keep
    ``time.monotonic`` for a :class:`~kdispatch.ProcessDispatcher`, whose child compares the
    deadline with it); ``wall_clock`` only fills the Lease's ``acquireTime``/``renewTime``.
    Bad arguments raise :class:`~kdispatch.InvalidInputError` here.
    """

    def __init__(
        self,
        client: LeaseClient,
        config: ElectionConfig,
        *,
        on_lost: Callable[[LeadershipLost], None] | None = None,
        metrics_registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(config, ElectionConfig):
            raise InvalidInputError(f"config must be an ElectionConfig, got {config!r}")
        if on_lost is not None and not callable(on_lost):
            raise InvalidInputError("on_lost must be callable")
        for method in ("get", "create", "update"):
            if not callable(getattr(client, method, None)):
                raise InvalidInputError(
                    f"client must be a LeaseClient (get, create, update), got {client!r}"
                )
        if not callable(clock) or not callable(wall_clock):
            raise InvalidInputError("clock and wall_clock must be callables returning seconds")
        if metrics_registry is not None and not isinstance(metrics_registry, CollectorRegistry):
            raise InvalidInputError("metrics_registry must be a prometheus CollectorRegistry")
        self.config = config
        self._client = client
        self._on_lost = on_lost
        self._clock = clock
        self._wall = wall_clock
        self.metrics = LeaderMetrics(metrics_registry)
        self.metrics.is_leader.labels(config.name).set(0)
        self._cond = threading.Condition(threading.Lock())
        # Held for a whole acquire-or-renew attempt (its requests included): release() takes
        # it after ending the campaign, so no attempt writes the lease once it was freed.
        # Reentrant: on_lost may release from inside an attempt.
        self._attempt = threading.RLock()
        self._leading = False
        self._deadline = -math.inf
        self._lost: LeadershipLost | None = None
        self._stopped = False
        self._observed_rv: str | None = None
        self._observed_at = 0.0
        self._lease: Json | None = None  # the last version this replica wrote or read
        self._became_leader_at: float | None = None
        self._threads: list[threading.Thread] = []
        self._deadline_observers: list[Callable[[float], None]] = []

    # ----------------------------------------------------------------- state

    @property
    def is_leader(self) -> bool:
        """Any thread. True while the lease is held and the renew deadline has not passed (as
        :meth:`may_send`: past the deadline, leadership is lost here, ``on_lost`` on this
        thread)."""
        return self.may_send()

    @property
    def lost(self) -> LeadershipLost | None:
        """Any thread. Why leadership was lost (None if it never was)."""
        with self._cond:
            return self._lost

    @property
    def became_leader_at(self) -> float | None:
        """Any thread. ``clock()`` when this replica last became leader."""
        with self._cond:
            return self._became_leader_at

    def may_send(self) -> bool:
        """Executor worker threads (the dispatcher's ``send_gate``), before every request:
        True only while leading and before the renew deadline. Past the deadline, leadership
        is lost here and then (``on_lost`` runs on this thread)."""
        with self._cond:
            if not self._leading:
                return False
            if self._clock() < self._deadline:
                return True
        self.check_deadline()
        return False

    @property
    def clock(self) -> Callable[[], float]:
        """The monotonic clock the deadlines are measured on."""
        return self._clock

    @property
    def send_deadline(self) -> float:
        """Any thread. The deadline the send gate is open until, on :attr:`clock`: ``t0 +
        renew_deadline`` of the last successful acquire/renew while leading, else ``0.0``
        (closed). :meth:`may_send` is ``clock() < send_deadline``."""
        with self._cond:
            return self._deadline_locked()

    def watch_send_deadline(self, observer: Callable[[float], None]) -> None:
        """Any thread. Tell ``observer`` the :attr:`send_deadline` now, and again whenever it
        changes: the new deadline after every successful acquire or renew, ``0.0`` the moment
        this replica stops leading (lost, released, stopped). It runs with the elector's lock
        held, on the thread that made the change, in the critical section that changes
        :meth:`may_send`'s answer: the values arrive in order, and a reader of what it
        recorded is never ahead of the truth (``clock() < value`` exactly when
        :meth:`may_send`; :class:`~kdispatch.ProcessDispatcher` keeps it in shared memory for
        its child). It must only record the value: never block, never call the elector. An
        exception it raises is logged and ignored."""
        if not callable(observer):
            raise InvalidInputError("observer must be callable")
        with self._cond:
            self._deadline_observers.append(observer)
            self._tell_locked(observer, self._deadline_locked())

    def _deadline_locked(self) -> float:
        return self._deadline if self._leading else 0.0

    def _tell_locked(self, observer: Callable[[float], None], deadline: float) -> None:
        try:
            observer(deadline)
        except Exception:
            logger.opt(exception=True).error("send deadline observer raised")

    def _publish_locked(self) -> None:
        deadline = self._deadline_locked()
        for observer in self._deadline_observers:
            self._tell_locked(observer, deadline)

    def wait_for_leadership(self, timeout: float | None = None) -> bool:
        """Caller thread. Block until this replica leads (True), or it lost, was stopped, or
        ``timeout`` passed (False). ``timeout``: seconds >= 0, or None for no limit
        (:class:`~kdispatch.InvalidInputError` otherwise)."""
        timeout = check_timeout(timeout, allow_zero=True)
        with self._cond:
            self._cond.wait_for(
                lambda: self._leading or self._lost is not None or self._stopped, timeout
            )
            return self._leading

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> LeaseElector:
        """Caller thread. Start the election loop and the deadline watchdog."""
        with self._cond:
            if self._threads:
                raise InvalidInputError("elector already started")
            name = self.config.name
            self._threads = [
                threading.Thread(target=self._run, name=f"kdispatch-leader-{name}", daemon=True),
                threading.Thread(
                    target=self._watchdog, name=f"kdispatch-leader-watchdog-{name}", daemon=True
                ),
            ]
        for t in self._threads:
            t.start()
        return self

    def stop(self, *, release: bool = True, timeout: float | None = 10.0) -> bool:
        """Caller thread. Stop campaigning and join the elector's threads; with ``release``,
        give the lease up if held (:meth:`release`: the send gate closes first, then the Lease
        is written free with a 1 s duration, as client-go's ``ReleaseOnCancel`` does, so a
        follower takes over at its next retry). Call it after the dispatcher drained. Returns
        True if the lease was released now (False if :meth:`release` already freed it).
        Idempotent. ``timeout``: how long to wait for each thread, seconds >= 0 or None for no
        limit (:class:`~kdispatch.InvalidInputError` otherwise, before anything stops)."""
        timeout = check_timeout(timeout, allow_zero=True)
        with self._cond:
            self._stopped = True
            if self._leading:  # the gate closes first, before a wait for a hung request
                self._set_follower_locked()
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)
        return self.release() if release else False

    def release(self) -> bool:
        """Any thread. End the campaign (this elector never takes the lease again, so a
        follower takes over at its next retry; its threads end by themselves, :meth:`stop`
        joins them), close the send gate, wait for an attempt in flight to end (bounded by
        its request timeout), and free the lease if the last version this replica wrote or
        read names it as the holder, past the renew deadline too: the write carries that
        version's resourceVersion, so it frees the lease only if nobody wrote it since. On a
        409 the lease is read once more, and a newer version that still names this replica
        (a renewal that landed as the election stopped) is released in its turn. Returns
        True if the lease was freed now."""
        with self._cond:
            self._stopped = True
            if self._leading:
                self._set_follower_locked()
            self._cond.notify_all()
        # after an attempt in flight ended, none writes again (each sees _stopped)
        with self._attempt, self._cond:
            lease = self._lease
        cfg = self.config
        try:
            for _ in range(2):
                spec = dict((lease or {}).get("spec") or {})
                if lease is None or spec.get("holderIdentity") != cfg.identity:
                    return False
                now = _micro_time(self._wall())
                spec.update(
                    holderIdentity="", leaseDurationSeconds=1, renewTime=now, acquireTime=now
                )
                try:
                    written = self._client.update(
                        cfg.namespace, cfg.name, {**lease, "spec": spec}, timeout=cfg.renew_deadline
                    )
                except ConflictError:
                    lease = self._client.get(cfg.namespace, cfg.name, timeout=cfg.renew_deadline)
                    continue
                with self._cond:
                    self._lease = written
                logger.info("{} released lease {}", cfg.identity, cfg.name)
                return True
        except ApiError as exc:
            logger.warning("releasing lease {} failed: {}", cfg.name, exc)
            return False
        logger.warning("releasing lease {} failed: it kept changing", cfg.name)
        return False

    # ----------------------------------------------------------------- one attempt

    def step(self) -> None:
        """Election thread (or a test). One acquire-or-renew attempt, as client-go's
        ``tryAcquireOrRenew``; none once stopped, released or lost."""
        with self._attempt:
            self._step()

    def _step(self) -> None:
        """:meth:`step` with the attempt lock held. Election thread (or a test)."""
        cfg = self.config
        with self._cond:
            if self._lost is not None or self._stopped:
                return
            leading = self._leading
        if leading and self.check_deadline():
            return
        t0 = self._clock()
        timeout = max(0.001, self._deadline - t0) if leading else cfg.renew_deadline
        try:
            current = self._client.get(cfg.namespace, cfg.name, timeout=timeout)
            if current is None:
                written = self._client.create(cfg.namespace, self._record(None), timeout=timeout)
            else:
                holder = self._observe(current)
                if holder not in ("", cfg.identity):
                    if leading:
                        self._lose(f"lease {cfg.name} is held by {holder}")
                        return
                    if not self._expired(current):
                        return
                written = self._client.update(
                    cfg.namespace, cfg.name, self._record(current), timeout=timeout
                )
        except (AlreadyExistsError, ConflictError) as exc:
            logger.debug("{} lost a lease race: {}", cfg.identity, exc)
            return
        except ApiError as exc:
            logger.debug("{} could not reach lease {}: {}", cfg.identity, cfg.name, exc)
            return
        self._won(t0, written)

    def check_deadline(self) -> bool:
        """Any thread. Lose leadership if the renew deadline has passed; True if lost now or
        before."""
        with self._cond:
            if self._lost is not None:
                return True
            if not self._leading or self._clock() < self._deadline:
                return False
        self._lose(f"lease {self.config.name} not renewed within the renew deadline")
        return True

    # ----------------------------------------------------------------- internals

    def _observe(self, lease: Json) -> str:
        """Note a read record; restart its expiry timer when it changed. The holder."""
        rv = str((lease.get("metadata") or {}).get("resourceVersion", ""))
        now = self._clock()
        with self._cond:
            if rv != self._observed_rv:
                self._observed_rv, self._observed_at = rv, now
            self._lease = lease
        holder = (lease.get("spec") or {}).get("holderIdentity")
        return holder if isinstance(holder, str) else ""

    def _expired(self, lease: Json) -> bool:
        seconds = (lease.get("spec") or {}).get("leaseDurationSeconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
            seconds = self.config.lease_seconds
        with self._cond:
            return self._clock() >= self._observed_at + seconds

    def _record(self, current: Json | None) -> Json:
        """The Lease to write: held by this replica, renewed now."""
        cfg = self.config
        now = _micro_time(self._wall())
        old = dict((current or {}).get("spec") or {})
        keep = old.get("holderIdentity") == cfg.identity
        transitions = old.get("leaseTransitions") or 0
        if current is not None and not keep:
            transitions += 1
        spec = {
            **old,
            "holderIdentity": cfg.identity,
            "leaseDurationSeconds": cfg.lease_seconds,
            "acquireTime": old.get("acquireTime") if keep and old.get("acquireTime") else now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }
        if current is None:
            return {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": spec,
            }
        return {**current, "spec": spec}

    def _won(self, t0: float, lease: Json) -> None:
        """Election thread: an acquire or renew that began at ``t0`` was written; the gate is
        open until ``t0 + renew_deadline``. A renewal whose reply came after the deadline it
        was renewing never reopens the gate: leadership was lost at that deadline."""
        cfg = self.config
        with self._cond:
            self._lease = lease  # the server's newest version, even if this replica now stops
            if self._lost is not None or self._stopped:
                return
            expired = self._leading and self._clock() >= self._deadline
            became = False
            if not expired:
                self._deadline = t0 + cfg.renew_deadline
                self._observed_rv = str((lease.get("metadata") or {}).get("resourceVersion", ""))
                self._observed_at = self._clock()
                became = not self._leading
                if became:
                    self._leading = True
                    self._became_leader_at = self._clock()
                    self.metrics.is_leader.labels(cfg.name).set(1)
                    self.metrics.transitions.labels(cfg.name, "leader").inc()
                self._publish_locked()
                self._cond.notify_all()
        if expired:
            self._lose(f"lease {cfg.name} renewed only after the renew deadline")
        elif became:
            logger.info("{} became leader of lease {}", cfg.identity, cfg.name)

    def _set_follower_locked(self) -> None:
        self._leading = False
        self._publish_locked()
        self.metrics.is_leader.labels(self.config.name).set(0)
        self.metrics.transitions.labels(self.config.name, "follower").inc()
        self._cond.notify_all()

    def _lose(self, reason: str) -> None:
        with self._cond:
            if self._lost is not None or not self._leading:
                return
            error = LeadershipLost(reason)
            self._lost = error
            self._set_follower_locked()
        logger.warning("{} lost leadership: {}", self.config.identity, reason)
        if self._on_lost is not None:
            try:
                self._on_lost(error)
            except Exception:
                logger.opt(exception=True).error("on_lost raised")

    def _run(self) -> None:
        """Election thread: an attempt every ``retry_period`` until stopped or lost."""
        period = self.config.retry_period
        while True:
            started = self._clock()
            try:
                self.step()  # returns at once when stopped or lost
            except Exception:  # pragma: no cover - defensive: keep campaigning
                logger.opt(exception=True).error("leader election step failed")
            with self._cond:
                wait = max(0.0, started + period - self._clock())
                if self._cond.wait_for(lambda: self._stopped or self._lost is not None, wait):
                    return

    def _watchdog(self) -> None:
        """Watchdog thread: lose leadership at the renew deadline even while a renew request
        hangs on the election thread."""
        while True:
            with self._cond:
                if self._stopped or self._lost is not None:
                    return
                wait = max(0.0, self._deadline - self._clock()) if self._leading else None
                self._cond.wait(wait)
            self.check_deadline()
