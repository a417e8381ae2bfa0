"""Leader election: the Lease store, the elector on a fake clock, and the dispatcher fence.

Clock-driven behaviour is tested by calling :meth:`LeaseElector.step` and
:meth:`LeaseElector.check_deadline` with a fake monotonic clock (no threads, no sleeps). The
fence is tested end to end on a dispatcher whose backend holds a request in flight.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s
from kubernetes.leaderelection import electionconfig as _electionconfig
from kubernetes.leaderelection import leaderelection as _leaderelection
from kubernetes.leaderelection.resourcelock import leaselock as _leaselock
from prometheus_client import CollectorRegistry

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import DispatcherConfig, ExecutorConfig, RateLimitConfig
from kdispatch.actors.model.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidConfigError,
    InvalidInputError,
    LeadershipLost,
    NotFoundError,
    Outcome,
    RequestTimeoutError,
)
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.adapters.leader import (
    ClientLeaseClient,
    ElectionConfig,
    LeaseElector,
)
from kdispatch.testing import MemoryLeaseClient
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from tests.backends import GatedBackend
from tests.clocks import ManualClock
from tests.rawhttp import TricklingServer

# the official election package is untyped
electionconfig: Any = _electionconfig
leaderelection: Any = _leaderelection
LeaseLock: Any = _leaselock.LeaseLock

pytestmark = pytest.mark.timeout(60)


def lease_body(holder: str = "a", rv: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "sched"}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}


# --------------------------------------------------------------------------- the Lease store


def test_lease_store_optimistic_concurrency() -> None:
    server = InMemoryApiServer()
    leases = server.leases
    created = leases.create("kube-system", lease_body("a"))
    rv = created["metadata"]["resourceVersion"]
    assert created["apiVersion"] == "coordination.k8s.io/v1"
    with pytest.raises(AlreadyExistsError):
        leases.create("kube-system", lease_body("b"))
    updated = leases.update("kube-system", "sched", lease_body("b", rv))
    assert updated["spec"]["holderIdentity"] == "b"
    with pytest.raises(ConflictError):  # the old resourceVersion lost the race
        leases.update("kube-system", "sched", lease_body("c", rv))
    assert leases.get("kube-system", "sched")["spec"]["holderIdentity"] == "b"
    patched = leases.patch("kube-system", "sched", {"spec": {"holderIdentity": "d"}})
    assert patched["spec"] == {"holderIdentity": "d", "leaseDurationSeconds": 15}
    with pytest.raises(ConflictError):
        leases.patch("kube-system", "sched", {"metadata": {"resourceVersion": rv}})
    items = leases.list("kube-system").items
    assert [i["metadata"]["name"] for i in items] == ["sched"]
    with pytest.raises(ConflictError):
        leases.delete("kube-system", "sched", resource_version=rv)
    leases.delete("kube-system", "sched")
    with pytest.raises(NotFoundError):
        leases.get("kube-system", "sched")
    assert [w.op for w in leases.writes] == ["create", "update", "patch", "delete"]


def test_lease_store_rejects_bad_specs() -> None:
    leases = InMemoryApiServer().leases
    bad = lease_body()
    bad["spec"]["leaseDurationSeconds"] = "15"
    with pytest.raises(Exception, match="leaseDurationSeconds"):
        leases.create("default", bad)
    with pytest.raises(NotFoundError):
        leases.update("default", "sched", lease_body())


@pytest.fixture
def http() -> Iterator[ApiServerHTTP]:
    with ApiServerHTTP(InMemoryApiServer()) as srv:
        yield srv


def _client(url: str, agent: str = "test") -> k8s.ApiClient:
    api = k8s.ApiClient(k8s.Configuration(host=url))
    api.user_agent = agent
    return api


def test_coordination_api_over_http(http: ApiServerHTTP) -> None:
    """The official client's CoordinationV1Api: create, read, replace (409 on a stale
    resourceVersion), patch, list, delete."""
    with _client(http.url, "writer-1") as api:
        coord: Any = k8s.CoordinationV1Api(api)
        spec = k8s.V1LeaseSpec(holder_identity="x", lease_duration_seconds=5)
        lease = coord.create_namespaced_lease(
            "default", k8s.V1Lease(metadata=k8s.V1ObjectMeta(name="l"), spec=spec)
        )
        lease.spec.holder_identity = "y"
        assert coord.replace_namespaced_lease("l", "default", lease).spec.holder_identity == "y"
        with pytest.raises(k8s.ApiException) as err:
            coord.replace_namespaced_lease("l", "default", lease)
        assert err.value.status == 409
        patched = coord.patch_namespaced_lease("l", "default", {"spec": {"holderIdentity": "z"}})
        assert patched.spec.holder_identity == "z"
        assert len(coord.list_lease_for_all_namespaces().items) == 1
        coord.delete_namespaced_lease("l", "default")
        with pytest.raises(k8s.ApiException) as err:
            coord.read_namespaced_lease("l", "default")
        assert err.value.status == 404
    assert {w.writer for w in http.server.leases.writes} == {"writer-1"}


def test_official_leaderelection_and_this_elector_exclude_each_other(http: ApiServerHTTP) -> None:
    """``kubernetes.leaderelection`` works over the REST paths, and a lease held by it keeps
    this elector out (and the other way round): same protocol, same Lease fields."""
    with _client(http.url) as api:
        lock = LeaseLock("sched", "kube-system", "official")
        lock.api_instance = k8s.CoordinationV1Api(api)  # LeaseLock offers no ApiClient argument
        official = leaderelection.LeaderElection(
            electionconfig.Config(lock, 15, 10, 2, lambda: None, None)
        )
        assert official.try_acquire_or_renew()
        ours = LeaseElector(ClientLeaseClient(api), ElectionConfig("sched", identity="ours"))
        ours.step()
        assert not ours.is_leader
        # once the official holder stops renewing, a later observation lets us in
        lease = http.server.leases.get("kube-system", "sched")
        assert lease["spec"]["holderIdentity"] == "official"

    server = InMemoryApiServer()
    with ApiServerHTTP(server) as srv2, _client(srv2.url) as api2:
        ours2 = LeaseElector(ClientLeaseClient(api2), ElectionConfig("sched", identity="ours"))
        ours2.step()
        assert ours2.is_leader
        lock2 = LeaseLock("sched", "kube-system", "official")
        lock2.api_instance = k8s.CoordinationV1Api(api2)
        official2 = leaderelection.LeaderElection(
            electionconfig.Config(lock2, 15, 10, 2, lambda: None, None)
        )
        assert not official2.try_acquire_or_renew()
        assert _holder(server) == "ours"


def test_a_lease_request_ends_within_its_timeout_when_the_reply_trickles() -> None:
    """The elector's ``timeout`` bounds a Lease request as a whole: a reply the server sends a
    byte at a time (every wait short) ends in ``RequestTimeoutError``, not after the 20 s the
    whole reply would take, and the connection is closed."""
    lease = {"kind": "Lease", "metadata": {"name": "sched", "namespace": "kube-system"}}
    body = json.dumps(lease).encode().ljust(400)  # 400 bytes: 20 s at the server's pace
    with TricklingServer(body) as srv, _client(srv.url) as api:
        with pytest.raises(RequestTimeoutError):
            ClientLeaseClient(api).get("kube-system", "sched", timeout=0.5)
        assert srv.hung_up.wait(10), "the client kept the trickling connection open"
        read = ClientLeaseClient(api).get("kube-system", "sched", timeout=5)
        assert read is not None and read["kind"] == "Lease"


# --------------------------------------------------------------------------- the elector


def _elector(
    server: InMemoryApiServer, identity: str, clock: ManualClock, **kw: Any
) -> tuple[LeaseElector, list[LeadershipLost]]:
    lost: list[LeadershipLost] = []
    cfg = ElectionConfig(
        "sched", identity=identity, lease_duration=15, renew_deadline=10, retry_period=2
    )
    elector = LeaseElector(
        MemoryLeaseClient(server, writer=identity),
        cfg,
        on_lost=lost.append,
        clock=clock,
        metrics_registry=kw.get("registry"),
    )
    return elector, lost


def _a_leads(
    **kw: Any,
) -> tuple[InMemoryApiServer, ManualClock, LeaseElector, list[LeadershipLost]]:
    """Elector ``a`` on a fresh server at t=1000, stepped once: it took the lease. Returns the
    server, the clock, ``a`` and what ``a`` lost; ``kw`` goes to :func:`_elector`."""
    server, clock = InMemoryApiServer(), ManualClock(1000.0)
    a, lost = _elector(server, "a", clock, **kw)
    a.step()
    return server, clock, a, lost


def _a_leads_b_follows() -> tuple[
    InMemoryApiServer, ManualClock, LeaseElector, list[LeadershipLost], LeaseElector
]:
    """:func:`_a_leads`, and elector ``b`` stepped once after it: ``b`` has seen ``a``'s
    record. Returns the server, the clock, ``a``, what ``a`` lost, and ``b``."""
    server, clock, a, lost = _a_leads()
    b, _ = _elector(server, "b", clock)
    b.step()
    return server, clock, a, lost, b


def _write_lease(server: InMemoryApiServer, **spec: Any) -> None:
    """Another writer changes the lease's ``spec`` fields behind the electors' backs."""
    server.leases.patch("kube-system", "sched", {"spec": spec})


def _holder(server: InMemoryApiServer) -> str:
    """The lease's holderIdentity as stored."""
    return str(server.leases.get("kube-system", "sched")["spec"]["holderIdentity"])


def test_config_is_checked() -> None:
    with pytest.raises(InvalidConfigError):
        ElectionConfig("s", identity="a", lease_duration=10, renew_deadline=10)
    with pytest.raises(InvalidConfigError):
        ElectionConfig("s", identity="a", renew_deadline=2, retry_period=2)
    with pytest.raises(InvalidConfigError):
        ElectionConfig("s", identity="")
    with pytest.raises(InvalidConfigError):
        ElectionConfig("Not_A_Name", identity="a")  # the Lease's name: an RFC 1123 subdomain
    with pytest.raises(InvalidConfigError):
        ElectionConfig("s", identity="a", namespace="a.b")  # a namespace: an RFC 1123 label
    d = ElectionConfig("s", identity="a")
    assert (d.lease_duration, d.renew_deadline, d.retry_period) == (15, 10, 2)


def test_bad_elector_arguments_are_refused_when_given() -> None:
    """A typed error at the call, never an AttributeError on the election thread later, nor a
    wait that never ends (a NaN timeout)."""
    server = InMemoryApiServer()
    cfg = ElectionConfig("sched", identity="a")
    lease_client = MemoryLeaseClient(server)
    bad: list[dict[str, Any]] = [
        {"client": None},
        {"config": "sched"},
        {"on_lost": 5},
        {"clock": 5},
        {"wall_clock": "now"},
        {"metrics_registry": 5},
    ]
    for kwargs in bad:
        with pytest.raises(InvalidInputError):
            LeaseElector(**{"client": lease_client, "config": cfg, **kwargs})
    elector = LeaseElector(lease_client, cfg)
    for timeout in ("1", float("nan"), -1, float("inf")):
        with pytest.raises(InvalidInputError, match="timeout"):
            elector.wait_for_leadership(timeout)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="timeout"):
            elector.stop(timeout=timeout)  # type: ignore[arg-type]
    assert not elector.wait_for_leadership(0)
    assert elector.stop(timeout=None) is False  # nothing held, nothing released


def test_a_renewal_whose_reply_comes_after_the_deadline_never_reopens_the_gate() -> None:
    """The gate closed at the deadline (1010) while the renewal begun at 1008 was on the wire:
    leadership was lost then, and the late reply does not lead on until 1018."""
    _server, clock, a, lost = _a_leads()
    told: list[float] = []
    a.watch_send_deadline(told.append)
    real_update = a._client.update

    def late_update(*args: Any, **kw: Any) -> Any:
        written = real_update(*args, **kw)
        clock.now = 1011.0  # the reply arrives after the deadline
        return written

    a._client.update = late_update  # type: ignore[method-assign]
    clock.now = 1008.0
    a.step()
    assert not a.may_send() and not a.is_leader
    assert len(lost) == 1 and "after the renew deadline" in str(lost[0])
    assert told == [1010.0, 0.0]
    assert a.send_deadline == 0.0


def test_gate_closes_at_renew_deadline_from_the_last_successful_renew() -> None:
    registry = CollectorRegistry()
    server, clock, a, lost = _a_leads(registry=registry)
    assert a.is_leader and a.may_send()
    assert registry.get_sample_value("kdispatch_leader_is_leader", {"lease": "sched"}) == 1
    clock.now += 2
    a.step()  # renewed at t=1002: the deadline is 1012
    _write_lease(server, leaseTransitions=0)
    clock.now = 1011.999
    assert a.may_send() and not lost
    clock.now = 1012.0
    assert not a.may_send()  # the gate itself notices the deadline
    assert len(lost) == 1 and isinstance(lost[0], LeadershipLost)
    assert a.check_deadline() and len(lost) == 1  # on_lost ran exactly once
    a.step()  # a lost elector never campaigns again
    assert not a.is_leader
    assert registry.get_sample_value("kdispatch_leader_is_leader", {"lease": "sched"}) == 0
    assert (
        registry.get_sample_value(
            "kdispatch_leader_transitions_total", {"lease": "sched", "to": "follower"}
        )
        == 1
    )


def test_metrics_and_became_leader_at_follow_each_transition() -> None:
    """``kdispatch_leader_is_leader{lease}`` and ``kdispatch_leader_transitions_total{lease,to}``
    in the elector's ``metrics_registry``; ``became_leader_at`` is ``clock()`` when this
    replica last became leader. A renewal is no transition; a release is one, to follower."""
    registry = CollectorRegistry()
    server, clock = InMemoryApiServer(), ManualClock(1000.0)
    a, _ = _elector(server, "a", clock, registry=registry)

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"lease": "sched", **labels})

    assert sample("kdispatch_leader_is_leader") == 0 and a.became_leader_at is None
    clock.now = 1003.0
    a.step()
    assert sample("kdispatch_leader_is_leader") == 1
    assert sample("kdispatch_leader_transitions_total", to="leader") == 1
    assert a.became_leader_at == 1003.0
    clock.now = 1005.0
    a.step()  # renewed
    assert sample("kdispatch_leader_transitions_total", to="leader") == 1
    assert a.became_leader_at == 1003.0
    assert a.release()
    assert sample("kdispatch_leader_is_leader") == 0
    assert sample("kdispatch_leader_transitions_total", to="follower") == 1


def test_failed_renewals_lose_leadership_at_the_deadline() -> None:
    _server, clock, a, lost = _a_leads()

    def unreachable(*_a: Any, **_k: Any) -> Any:
        from kdispatch.actors.model.errors import ApiConnectionError

        raise ApiConnectionError("down")

    a._client.get = unreachable  # type: ignore[method-assign]
    for _ in range(4):
        clock.now += 2
        a.step()
        assert a.is_leader, "renewals may fail until the deadline"
    clock.now += 2  # t0 + 10
    a.step()
    assert not a.is_leader and len(lost) == 1


def test_follower_waits_a_full_lease_duration_after_observing_the_record() -> None:
    server, clock, a, _, b = _a_leads_b_follows()  # observes a's record at t=1000
    assert not b.is_leader
    clock.now += 14.9
    b.step()
    assert not b.is_leader
    clock.now = 1015.0
    b.step()
    assert b.is_leader
    lease = server.leases.get("kube-system", "sched")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    # the old leader's gate closed at 1010, before b could take over at 1015
    assert not a.may_send()


def test_a_renewal_restarts_the_followers_timer() -> None:
    _server, clock, a, _, b = _a_leads_b_follows()
    clock.now += 8
    a.step()
    b.step()  # sees the renewed record at 1008
    clock.now = 1020
    b.step()
    assert not b.is_leader
    clock.now = 1023
    b.step()
    assert b.is_leader


def test_a_fractional_lease_duration_counts_rounded_up_on_the_lease() -> None:
    """The Lease holds the duration in whole seconds (``leaseDurationSeconds``): 1.5 s counts
    as 2 s there, never shorter. Leader ``a`` renews at t=1000 and dies (it never steps
    again); follower ``b`` saw that record at t=1000 and retries every 0.1 s: it takes over
    within ``ceil(lease_duration) + retry_period``, not before ``ceil(lease_duration)``, and
    ``a``'s gate closed at least ``lease_duration - renew_deadline`` before."""
    server, clock_a, clock_b = InMemoryApiServer(), ManualClock(1000.0), ManualClock(1000.0)

    def elector(identity: str, clock: ManualClock) -> LeaseElector:
        cfg = ElectionConfig(
            "sched", identity=identity, lease_duration=1.5, renew_deadline=1.0, retry_period=0.1
        )
        return LeaseElector(MemoryLeaseClient(server, writer=identity), cfg, clock=clock)

    a, b = elector("a", clock_a), elector("b", clock_b)
    a.step()
    assert a.may_send()
    assert server.leases.get("kube-system", "sched")["spec"]["leaseDurationSeconds"] == 2
    b.step()  # observes a's record at t=1000
    retries = 0
    while not b.may_send() and retries < 30:  # up to t=1003
        retries += 1
        clock_b.now = 1000.0 + retries / 10
        b.step()
    assert b.may_send() and _holder(server) == "b"
    assert 1000.0 + 2 <= clock_b.now <= 1000.0 + 2 + 0.1 + 1e-9
    assert a.send_deadline <= clock_b.now - (1.5 - 1.0)


def test_leader_that_sees_another_holder_loses_at_once() -> None:
    server, clock, a, lost = _a_leads()
    _write_lease(server, holderIdentity="intruder")
    clock.now += 2
    a.step()
    assert not a.is_leader and "intruder" in str(lost[0])


def test_release_hands_over_at_the_next_retry() -> None:
    server, clock, a, lost, b = _a_leads_b_follows()
    assert a.release()
    assert not a.may_send() and not lost  # a graceful release is not a loss
    clock.now += 2
    b.step()
    assert b.is_leader
    assert _holder(server) == "b"


def test_a_released_elector_never_takes_the_lease_back() -> None:
    """``release`` ends the campaign: later attempts write nothing, even to a free lease."""
    server, clock, a, lost = _a_leads()
    assert a.release()
    for _ in range(3):
        clock.now += 2
        a.step()
    assert _holder(server) == "" and not a.may_send() and not lost
    assert [w.op for w in server.leases.writes] == ["create", "update"]
    assert not a.wait_for_leadership(timeout=0)


def test_release_on_a_running_elector_hands_over_to_the_follower() -> None:
    """Threads on the real clock: after ``release`` the leader's election loop ends by itself
    and the follower takes the lease at its next retry."""
    server = InMemoryApiServer()

    def start(identity: str) -> LeaseElector:
        cfg = ElectionConfig(
            "sched", identity=identity, lease_duration=1.5, renew_deadline=1.0, retry_period=0.1
        )
        return LeaseElector(MemoryLeaseClient(server, writer=identity), cfg).start()

    a = start("a")
    a_threads = [t for t in threading.enumerate() if t.name.startswith("kdispatch-leader-")]
    b: LeaseElector | None = None
    try:
        assert a.wait_for_leadership(5.0)
        b = start("b")
        assert a.release()
        assert not a.may_send()
        assert len(a_threads) == 2  # the election loop and the watchdog
        for t in a_threads:
            t.join(5.0)
            assert not t.is_alive(), f"{t.name} still runs after release"
        assert b.wait_for_leadership(5.0)
        assert _holder(server) == "b"
        a_writes = [w for w in server.leases.writes if w.writer == "a"]
        assert a_writes[-1].holder == ""  # a's last write freed the lease
        assert not a.is_leader and a.lost is None
    finally:
        if b is not None:
            b.stop(release=True)
        a.stop(release=True)
    assert _holder(server) == ""


def test_release_after_the_renew_deadline_still_frees_an_untouched_lease() -> None:
    """A drain that used the whole renew window (or renewals starved on a loaded machine):
    the lease still names this replica and nobody wrote it since, so releasing it is safe."""
    server, clock, a, _ = _a_leads()
    clock.now += 30  # far past the renew deadline, no renewal in between
    assert a.release()
    assert not a.may_send()
    assert _holder(server) == ""
    assert not a.release()  # already free: nothing to release (and no conflict)


def test_release_after_a_renewal_it_did_not_record_still_frees_the_lease() -> None:
    """A renewal that landed while the election was stopping leaves this replica with an older
    version: the release gets a 409, reads the lease again, sees itself as the holder and
    frees it."""
    server, _clock, a, _ = _a_leads()
    _write_lease(server, renewTime="2026-12-01T00:00:01Z")
    assert a.release()
    assert _holder(server) == ""


def test_release_never_frees_a_lease_another_replica_wrote_since() -> None:
    server, clock, a, _ = _a_leads()
    _write_lease(server, holderIdentity="b")
    clock.now += 30
    assert not a.release()  # its version is stale: the resourceVersion precondition fails
    assert _holder(server) == "b"
    assert not a.may_send()


def test_on_lost_may_release_from_the_attempt_that_noticed_the_loss() -> None:
    """``on_lost`` runs on the thread that noticed the loss, here the election step itself
    (it holds the attempt lock), and ``release()`` works from any thread: from the hook too,
    without a deadlock, freeing the lease that still names this replica."""
    server, clock = InMemoryApiServer(), ManualClock(1000.0)
    released: list[bool] = []
    electors: list[LeaseElector] = []
    a = LeaseElector(
        MemoryLeaseClient(server, writer="a"),
        ElectionConfig("sched", identity="a"),
        on_lost=lambda _err: released.append(electors[0].release()),
        clock=clock,
    )
    electors.append(a)
    a.step()
    clock.now = 1010.0  # the renew deadline passed without a renewal
    stepped = threading.Event()

    def step() -> None:
        a.step()
        stepped.set()

    worker = threading.Thread(target=step, name="step")
    worker.start()
    assert stepped.wait(10), "step deadlocked in on_lost -> release"
    worker.join(10)
    assert released == [True]
    assert _holder(server) == "" and a.lost is not None and not a.may_send()


def test_two_candidates_racing_for_a_free_lease_one_wins() -> None:
    """Both saw no lease; the second create gets 409 and the loser stays a follower; a stale
    update (an old resourceVersion) gets 409 as well."""
    server, clock, b_clock = InMemoryApiServer(), ManualClock(1000.0), ManualClock(1000.0)
    a, _ = _elector(server, "a", clock)
    b, _ = _elector(server, "b", b_clock)
    real_get = b._client.get
    b._client.get = lambda *_a, **_k: None  # type: ignore[method-assign]
    a.step()
    b.step()  # b believes the lease is free and tries to create it
    assert a.is_leader and not b.is_leader
    b._client.get = real_get  # type: ignore[method-assign]
    stale = server.leases.get("kube-system", "sched")
    clock.now += 2
    a.step()  # a renews: the resourceVersion b would send is now stale
    b._client.get = lambda *_a, **_k: stale  # type: ignore[method-assign]
    b.step()  # b observes the (stale) record
    b_clock.now += 100  # on b's clock it looks expired; its update carries the old version
    b.step()
    assert a.is_leader and not b.is_leader
    assert _holder(server) == "a"
    assert {w.writer for w in server.leases.writes} == {"a"}


def test_threads_start_and_stop_cleanly() -> None:
    server = InMemoryApiServer()
    cfg = ElectionConfig(
        "sched", identity="a", lease_duration=1.5, renew_deadline=1.0, retry_period=0.2
    )
    elector = LeaseElector(MemoryLeaseClient(server), cfg).start()
    assert elector.wait_for_leadership(5.0)
    with pytest.raises(InvalidInputError, match="already started"):
        elector.start()
    assert elector.stop(release=True)
    assert _holder(server) == ""


class HangingLeaseClient(MemoryLeaseClient):
    """A :class:`MemoryLeaseClient` whose ``get`` hangs, as a renewal on a dead connection,
    once ``hang`` is set and until ``unhang`` is set; ``hanging`` is set when one hangs."""

    def __init__(self, server: InMemoryApiServer, writer: str) -> None:
        super().__init__(server, writer=writer)
        self.hang = threading.Event()
        self.unhang = threading.Event()
        self.hanging = threading.Event()

    def get(self, namespace: str, name: str, *, timeout: float) -> Any:
        if self.hang.is_set():
            self.hanging.set()
            assert self.unhang.wait(30), "never let go"
        return super().get(namespace, name, timeout=timeout)


def test_the_watchdog_loses_leadership_at_the_deadline_while_a_renewal_hangs() -> None:
    """The watchdog loses leadership at the renew deadline even while a renewal hangs on the
    election thread: ``on_lost`` runs once, on the watchdog's thread (nobody else checks),
    and the gate is closed. ``stop(release=True)`` then still frees the lease."""
    server = InMemoryApiServer()
    client = HangingLeaseClient(server, "a")
    cfg = ElectionConfig(
        "sched", identity="a", lease_duration=3.0, renew_deadline=2.0, retry_period=0.1
    )
    lost: Future[tuple[LeadershipLost, str]] = Future()
    calls: list[LeadershipLost] = []

    def on_lost(err: LeadershipLost) -> None:
        calls.append(err)
        if not lost.done():
            lost.set_result((err, threading.current_thread().name))

    elector = LeaseElector(client, cfg, on_lost=on_lost).start()
    try:
        assert elector.wait_for_leadership(10)
        client.hang.set()
        assert client.hanging.wait(10)  # a renewal hangs on the election thread
        err, thread = lost.result(10)
        assert "renew deadline" in str(err)
        assert thread == "kdispatch-leader-watchdog-sched"
        assert not elector.may_send() and elector.send_deadline == 0.0
        assert elector.lost is err
    finally:
        client.unhang.set()
        elector.stop(release=True)
    assert len(calls) == 1
    assert _holder(server) == ""  # freed past the deadline: nobody wrote the lease since


def test_wait_for_leadership_returns_false_when_stopped_while_it_waits() -> None:
    """Another replica holds the lease: a waiter with no timeout is woken by ``stop()``
    (False), and the stop releases nothing."""
    server = InMemoryApiServer()
    b, _ = _elector(server, "b", ManualClock(1000.0))
    b.step()  # b holds the lease: a can only follow
    cfg = ElectionConfig(
        "sched", identity="a", lease_duration=15, renew_deadline=10, retry_period=0.1
    )
    a = LeaseElector(MemoryLeaseClient(server, writer="a"), cfg).start()
    answer: Future[bool] = Future()
    waiter = threading.Thread(target=lambda: answer.set_result(a.wait_for_leadership(None)))
    waiter.start()
    try:
        assert a.stop(release=True) is False  # nothing held, nothing released
        assert answer.result(10) is False
    finally:
        a.stop(release=True)
        waiter.join(10)
    assert _holder(server) == "b"


def test_stop_closes_the_gate_before_it_joins_a_hung_election_thread() -> None:
    """``stop()``: the send gate closes first. While it joins an election thread whose
    renewal hangs, ``may_send()`` is already False and 0.0 was told; once the renewal
    returns, the lease is written free."""
    server = InMemoryApiServer()
    client = HangingLeaseClient(server, "a")
    cfg = ElectionConfig(
        "sched", identity="a", lease_duration=30, renew_deadline=20, retry_period=0.1
    )
    elector = LeaseElector(client, cfg).start()
    told: list[float] = []
    stopped: Future[bool] = Future()
    stopper: threading.Thread | None = None
    try:
        assert elector.wait_for_leadership(10)
        elector.watch_send_deadline(told.append)
        client.hang.set()
        assert client.hanging.wait(10)
        watchdogs = [
            t for t in threading.enumerate() if t.name == "kdispatch-leader-watchdog-sched"
        ]
        assert len(watchdogs) == 1
        stopper = threading.Thread(
            target=lambda: stopped.set_result(elector.stop(release=True, timeout=30)),
            name="stopper",
        )
        stopper.start()
        watchdogs[0].join(10)  # it ends once stop() began; the election thread still hangs
        assert not watchdogs[0].is_alive()
        assert not stopped.done()
        assert not elector.may_send()
        assert told[-1] == 0.0
    finally:
        client.unhang.set()
        if stopper is not None:
            stopper.join(30)
        elector.stop(release=True)
    assert stopped.result(0) is True
    assert _holder(server) == ""


# --------------------------------------------------------------------------- the fence


def _dispatcher(backend: Any, gate: Any) -> Dispatcher:
    cfg = DispatcherConfig(executor=ExecutorConfig(workers=1))
    return Dispatcher(backend, cfg, metrics_registry=CollectorRegistry(), send_gate=gate).start()


def test_revoke_resolves_pending_calls_and_stops_intake() -> None:
    server = InMemoryApiServer()
    pods = [server.create(make_pod(f"p{i}")) for i in range(3)]
    server.create({"kind": "Node", "metadata": {"name": "n1"}})
    backend = GatedBackend(server, hold="p0")
    d = _dispatcher(backend, lambda: True)
    try:
        futures = [d.submit(PodBinding.for_pod(p, "n1")) for p in pods]
        backend.wait_calls(1)  # p0 is on the wire, the others wait behind the one worker
        d.revoke(LeadershipLost("lease lost"))
        for f in futures[1:]:
            assert isinstance(f.exception(timeout=10), LeadershipLost)
        with pytest.raises(LeadershipLost):
            d.submit(PodBinding.for_pod(pods[1], "n1"))
        backend.gate.set()  # the request on the wire finishes and reports its real result
        assert futures[0].result(timeout=10) is Outcome.SUCCESS
    finally:
        backend.gate.set()
        d.stop(timeout=10)
    bound = [p["metadata"]["name"] for p in server.list("Pod").items if p["spec"].get("nodeName")]
    assert bound == ["p0"]  # only the request already on the wire landed


def test_closed_gate_sends_nothing_and_resolves_leadership_lost() -> None:
    server = InMemoryApiServer()
    pod = server.create(make_pod("p"))
    open_ = [True]
    d = _dispatcher(server, lambda: open_[0])
    try:
        open_[0] = False
        future = d.submit(PodBinding.for_pod(pod, "n1"))
        err = future.exception(timeout=10)
        assert isinstance(err, LeadershipLost)  # refused before it was sent
        d.revoke(LeadershipLost("deadline"))
        with pytest.raises(LeadershipLost):
            d.submit(PodBinding.for_pod(pod, "n1"))
    finally:
        d.stop(timeout=10)
    assert server.counts()["bind"] == 0
    assert [r for r in server.request_log if r.op == "bind"] == []


class OneRequestGate:
    """A send gate that lets ``opens`` requests through, then stays closed."""

    def __init__(self, opens: int = 1) -> None:
        self.opens = opens

    def __call__(self) -> bool:
        self.opens -= 1
        return self.opens >= 0


def test_the_gate_is_checked_before_a_follow_up_get() -> None:
    """The gate closes between a status patch's 409 and the GET that would follow it: the GET
    is never sent and the call resolves ``LeadershipLost``."""
    server = InMemoryApiServer()
    pod = server.create(make_pod("p"))
    server.script("patch_status", "409", name="p")
    d = _dispatcher(server, OneRequestGate())
    try:
        late = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        future = d.submit(PodStatusPatch.for_pod(pod, conditions=[late]))
        assert isinstance(future.exception(timeout=10), LeadershipLost)
    finally:
        d.stop(timeout=10)
    assert [(r.op, r.outcome) for r in server.request_log] == [("patch_status", "409")]


def test_the_gate_is_checked_before_a_preemptions_delete() -> None:
    """The gate closes after a preemption's ``DisruptionTarget`` patch: its DELETE is never
    sent, the pod stays, and the call resolves ``LeadershipLost``."""
    server = InMemoryApiServer()
    pod = server.create(make_pod("victim"))
    d = _dispatcher(server, OneRequestGate())
    try:
        future = d.preempt(pod, preemptor="default/vip")
        assert isinstance(future.exception(timeout=10), LeadershipLost)
    finally:
        d.stop(timeout=10)
    assert [r.op for r in server.request_log] == ["patch_status"]
    assert server.get_object("Pod", "default", "victim") is not None


def test_a_follow_up_request_that_waited_for_its_token_past_the_deadline_is_not_sent() -> None:
    """A preemption's DELETE waits for its rate-limit token after the patch took the only one;
    the lease's renew deadline passes (``on_lost`` revokes the dispatcher) and only then the
    token comes: the gate is checked after the wait, so the DELETE is never sent and the pod
    stays."""
    server, clock = InMemoryApiServer(), ManualClock(1000.0)
    victim = server.create(make_pod("victim"))
    elector, lost = _elector(server, "a", clock)
    elector.step()  # leads; the send deadline is 1010
    delete_checked = threading.Event()
    checks = [0]

    def gate() -> bool:
        checks[0] += 1
        if checks[0] == 2:  # the DELETE's first look at the gate, before its token wait
            delete_checked.set()
        return elector.may_send()

    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=1.0, burst=1), executor=ExecutorConfig(workers=1)
    )
    d = Dispatcher(
        server, config, metrics_registry=CollectorRegistry(), clock=clock, send_gate=gate
    ).start()
    try:

        def on_lost(err: LeadershipLost) -> None:
            lost.append(err)
            d.revoke(err)

        elector._on_lost = on_lost
        future = d.preempt(victim, preemptor="default/vip")
        assert delete_checked.wait(10), "the DELETE never came to the gate"
        clock.now = 1010.0  # the deadline passes; the DELETE's token is due by now as well
        assert elector.check_deadline() and len(lost) == 1  # on_lost ran: leadership is lost
        d._executor.wake()  # the token wait sees the new time
        assert isinstance(future.exception(timeout=10), LeadershipLost)
    finally:
        d.stop(timeout=10)
    assert [(r.op, r.name) for r in server.request_log] == [("patch_status", "victim")]
    assert server.get_object("Pod", "default", "victim") is not None


def test_elector_gate_on_a_dispatcher_sends_nothing_after_the_deadline() -> None:
    server, clock = InMemoryApiServer(), ManualClock(1000.0)
    pods = [server.create(make_pod(f"p{i}")) for i in range(2)]
    elector, lost = _elector(server, "a", clock)
    d = _dispatcher(server, elector.may_send)
    try:

        def on_lost(err: LeadershipLost) -> None:
            lost.append(err)
            d.revoke(err)

        elector._on_lost = on_lost
        elector.step()
        assert d.submit(PodBinding.for_pod(pods[0], "n1")).result(timeout=10).value == "success"
        clock.now += 10  # the deadline passes without a renew
        future = d.submit(PodBinding.for_pod(pods[1], "n1"))
        assert isinstance(future.exception(timeout=10), LeadershipLost)
        assert len(lost) == 1
    finally:
        d.stop(timeout=10)
    binds = [r.name for r in server.request_log if r.op == "bind"]
    assert binds == ["p0"]


# --------------------------------------------------------------------------- the send deadline


def test_send_deadline_is_told_on_acquire_and_renew_and_zero_on_loss() -> None:
    server, clock = InMemoryApiServer(), ManualClock(1000.0)
    a, lost = _elector(server, "a", clock)
    told: list[float] = []
    a.watch_send_deadline(told.append)
    assert told == [0.0]  # told at once: closed, not leading yet
    a.step()  # acquired at t=1000
    clock.now = 1002.0
    a.step()  # renewed at t=1002
    assert told == [0.0, 1010.0, 1012.0]
    assert a.send_deadline == 1012.0

    def unreachable(*_a: Any, **_k: Any) -> Any:
        from kdispatch.actors.model.errors import ApiConnectionError

        raise ApiConnectionError("down")

    a._client.get = unreachable  # type: ignore[method-assign]
    clock.now = 1004.0
    a.step()  # a failed renewal tells nothing: the deadline stays where it was
    assert told[-1] == 1012.0
    clock.now = 1011.999
    assert a.may_send() and clock() < told[-1]
    clock.now = 1012.0
    assert not clock() < told[-1]  # the told deadline closes by the clock alone ...
    assert not a.may_send()  # ... exactly when may_send does, which then loses leadership
    assert told == [0.0, 1010.0, 1012.0, 0.0] and len(lost) == 1
    late: list[float] = []
    a.watch_send_deadline(late.append)
    assert late == [0.0]


def test_send_deadline_counts_from_before_the_request_was_sent() -> None:
    """The deadline is ``t0 + renew_deadline`` with ``t0`` taken before the acquire request,
    as for may_send: a slow request shortens the window, never lengthens it."""
    server, clock = InMemoryApiServer(), ManualClock(1000.0)
    a, _ = _elector(server, "a", clock)
    real_create = a._client.create

    def slow_create(*args: Any, **kw: Any) -> Any:
        clock.now += 3  # the request took 3 s
        return real_create(*args, **kw)

    a._client.create = slow_create  # type: ignore[method-assign]
    told: list[float] = []
    a.watch_send_deadline(told.append)
    a.step()
    assert told == [0.0, 1010.0] and clock.now == 1003.0


def test_send_deadline_closes_at_once_when_another_holder_is_seen_or_on_release() -> None:
    """Before the renew deadline: a loss (someone else holds the lease), a release and a stop
    tell 0.0 at that moment, so nobody reading the told value keeps sending until the old
    deadline."""
    server, clock = InMemoryApiServer(), ManualClock(1000.0)
    a, lost = _elector(server, "a", clock)
    told: list[float] = []
    a.watch_send_deadline(told.append)
    a.step()
    _write_lease(server, holderIdentity="intruder")
    clock.now += 1
    a.step()
    assert told == [0.0, 1010.0, 0.0] and len(lost) == 1

    server2 = InMemoryApiServer()
    b, b_lost = _elector(server2, "b", clock)
    b_told: list[float] = []
    b.watch_send_deadline(b_told.append)
    b.step()
    assert b.release()
    assert b_told == [0.0, 1011.0, 0.0] and not b_lost
    clock.now += 5
    b.step()  # released, not lost; but the campaign is over: it never leads again
    assert b_told == [0.0, 1011.0, 0.0] and not b.is_leader

    server3 = InMemoryApiServer()
    c, _ = _elector(server3, "c", clock)
    c_told: list[float] = []
    c.watch_send_deadline(c_told.append)
    c.step()
    c.stop(release=False)
    assert c_told == [0.0, 1016.0, 0.0]


def test_an_observer_that_raises_is_logged_and_the_others_are_still_told() -> None:
    server, clock = InMemoryApiServer(), ManualClock(1000.0)
    a, _ = _elector(server, "a", clock)

    def broken(_deadline: float) -> None:
        raise RuntimeError("observer bug")

    told: list[float] = []
    a.watch_send_deadline(broken)
    a.watch_send_deadline(told.append)
    a.step()
    assert a.may_send() and told == [0.0, 1010.0]
    with pytest.raises(InvalidInputError):
        a.watch_send_deadline(42)  # type: ignore[arg-type]


LEASE = ("Lease", "kube-system", "sched")
_OPS = st.lists(
    st.one_of(
        st.sampled_from(["step", "intruder", "free", "release", "down", "up", "check"]),
        st.floats(min_value=0.0, max_value=12.0),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(_OPS)
def test_the_told_deadline_always_agrees_with_may_send(ops: list[str | float]) -> None:
    """Whatever happens (renewals, failures, another holder, release, the clock moving), the
    last value told gives the same answer as may_send, and while leading it only moves later:
    a reader holding an older value holds an earlier deadline."""
    server, clock = InMemoryApiServer(), ManualClock(1000.0)
    a, _ = _elector(server, "a", clock)
    told: list[float] = []
    a.watch_send_deadline(told.append)
    real_get = a._client.get

    def unreachable(*_a: Any, **_k: Any) -> Any:
        from kdispatch.actors.model.errors import ApiConnectionError

        raise ApiConnectionError("down")

    for op in ops:
        if isinstance(op, float):
            clock.now += op
        elif op == "step":
            a.step()
        elif op in ("intruder", "free") and server.get_object(*LEASE):
            holder = "x" if op == "intruder" else ""
            _write_lease(server, holderIdentity=holder)
        elif op == "release":
            a.release()
        elif op in ("intruder", "free"):
            pass  # no lease yet
        elif op == "down":
            a._client.get = unreachable  # type: ignore[method-assign]
        elif op == "up":
            a._client.get = real_get  # type: ignore[method-assign]
        else:
            a.check_deadline()
        assert told[-1] == a.send_deadline
        expected = clock() < told[-1]
        assert a.may_send() is expected
        assert told[-1] == a.send_deadline  # may_send may have lost it: 0.0 told then
    leading = [v for v in told if v != 0.0]
    runs: list[list[float]] = [[]]
    for v in told:
        if v == 0.0:
            runs.append([])
        else:
            runs[-1].append(v)
    assert all(run == sorted(run) for run in runs), told
    assert all(v >= 1000.0 for v in leading)
