"""ProcessDispatcher with leader election: the child's send gate is a shared-memory deadline.

The apiserver is served over HTTP (``ApiServerHTTP``); the child builds a ``KubernetesBackend``
for its URL. The elector campaigns on the same in-memory apiserver's Leases and runs on the
real ``time.monotonic`` (the child compares the deadline with its own clock), driven by calling
:meth:`LeaseElector.step` from the test: no election threads, so the test decides when renewals
happen and when the parent stalls. Requests are held on the server (``HeldSleep``) to keep
calls pending in the child. Every check reads the server's request log and objects.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import wait
from dataclasses import dataclass

import pytest

from kdispatch.actors.engine.messages import CallFuture
from kdispatch.actors.facade.process import ProcessDispatcher
from kdispatch.actors.model.config import DispatcherConfig, ExecutorConfig, RetryConfig
from kdispatch.actors.model.errors import InvalidConfigError, LeadershipLost, Outcome
from kdispatch.actors.model.objects import Obj
from kdispatch.actors.model.pod_calls import PodBinding
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.adapters.leader import ElectionConfig, LeaseElector
from kdispatch.testing import MemoryLeaseClient
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, Latency, make_pod
from kdispatch.testing.waiting import wait_for
from tests.integration.test_process_dispatcher import WAIT, HeldSleep

pytestmark = pytest.mark.timeout(120)


@dataclass
class Cluster:
    server: InMemoryApiServer
    http: ApiServerHTTP
    held: HeldSleep

    def elector(
        self,
        renew_deadline: float = 30.0,
        on_lost: Callable[[LeadershipLost], None] | None = None,
    ) -> LeaseElector:
        cfg = ElectionConfig(
            "sched",
            identity="a",
            lease_duration=renew_deadline * 2,
            renew_deadline=renew_deadline,
            retry_period=renew_deadline / 4,
        )
        return LeaseElector(MemoryLeaseClient(self.server, writer="a"), cfg, on_lost=on_lost)

    def dispatcher(self, leader: LeaseElector) -> ProcessDispatcher:
        factory = functools.partial(KubernetesBackend.for_url, self.http.url, workers=1)
        config = DispatcherConfig(executor=ExecutorConfig(workers=1), retry=RetryConfig(budget=5.0))
        return ProcessDispatcher(factory, config, leader=leader)

    def pod(self, name: str) -> Obj:
        return self.server.create(make_pod(name))

    def bound(self) -> list[str]:
        """Names of the pods the server holds bound, in name order."""
        pods = self.server.list("Pod").items
        return sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))

    def bind_requests(self) -> list[str]:
        return [r.name for r in self.server.request_log if r.op == "bind"]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    held = HeldSleep()
    server = InMemoryApiServer(latency=Latency(per_op={"bind": 1.0}), sleep=held)
    with ApiServerHTTP(server) as http:
        yield Cluster(server, http, held)
        held.gate.set()


def _intrude(server: InMemoryApiServer) -> None:
    """Another replica takes the lease (as after a partition)."""
    server.leases.patch("kube-system", "sched", {"spec": {"holderIdentity": "b"}})


def _submit_held(
    cluster: Cluster, d: ProcessDispatcher, names: list[str], renew: LeaseElector | None = None
) -> list[CallFuture]:
    """Submit a binding per pod; return once the first is held in flight on the server (the
    rest queue behind the child's one executor worker). With ``renew``, the elector renews
    while waiting, as its election loop would."""
    futures = [d.submit(PodBinding.for_pod(cluster.pod(n), "node-1")) for n in names]

    def arrived() -> bool:
        if cluster.held.arrived >= 1:
            return True
        if renew is not None:
            renew.step()  # as the election loop would, while waiting
        return False

    wait_for(arrived, WAIT, "the first binding on the server", interval=0.02)
    return futures


def _release_the_first(cluster: Cluster, futures: list[CallFuture]) -> None:
    """Let the binding held on the server answer: it succeeds, and every one queued behind it
    fails LeadershipLost."""
    cluster.held.gate.set()
    assert futures[0].result(WAIT) is Outcome.SUCCESS
    for f in futures[1:]:
        assert isinstance(f.exception(WAIT), LeadershipLost)


def test_gate_is_closed_until_the_elector_leads_then_calls_land(cluster: Cluster) -> None:
    elector = cluster.elector()
    with cluster.dispatcher(elector) as d:
        assert d.send_deadline == 0.0
        refused = d.submit(PodBinding.for_pod(cluster.pod("early"), "node-1"))
        assert isinstance(refused.exception(WAIT), LeadershipLost)  # typed, as in-process
        elector.step()  # leads: the deadline is told to the child's shared memory
        assert d.send_deadline == elector.send_deadline > time.monotonic()
        futures = [d.submit(PodBinding.for_pod(cluster.pod(f"p{i}"), "node-1")) for i in range(5)]
        done, _ = wait(futures, timeout=WAIT)
        assert {f.result() for f in done} == {Outcome.SUCCESS} and len(done) == 5
        assert d.stats()["sent"] == {"pod_binding": 5}
    assert cluster.bound() == [f"p{i}" for i in range(5)]
    assert sorted(cluster.bind_requests()) == [f"p{i}" for i in range(5)]  # "early": never sent


def test_lost_lease_closes_the_gate_for_every_call_not_yet_sent(cluster: Cluster) -> None:
    """No revoke: the shared deadline alone stops the child. The call on the wire finishes; the
    queued ones reach the gate after the loss and fail LeadershipLost, unsent."""
    elector = cluster.elector()
    with cluster.dispatcher(elector) as d:
        elector.step()
        cluster.held.gate.clear()
        futures = _submit_held(cluster, d, ["q0", "q1", "q2", "q3"])
        _intrude(cluster.server)
        elector.step()  # sees another holder: loses now, well before the renew deadline
        assert elector.lost is not None and d.send_deadline == 0.0
        _release_the_first(cluster, futures)
    assert cluster.bound() == ["q0"]
    assert cluster.bind_requests() == ["q0"]


def test_a_stalled_parent_lets_the_deadline_pass_and_the_child_stops_sending(
    cluster: Cluster,
) -> None:
    """The parent renews until the first call is in flight, then does nothing more (no step,
    no watchdog, no revoke): the child's gate closes when its own clock passes the deadline."""
    elector = cluster.elector(renew_deadline=2.0)
    with cluster.dispatcher(elector) as d:
        cluster.held.gate.clear()
        elector.step()
        futures = _submit_held(cluster, d, ["s0", "s1", "s2"], renew=elector)
        deadline = d.send_deadline
        assert deadline is not None and deadline > 0.0
        while time.monotonic() < deadline:  # the clock is what is under test here
            threading.Event().wait(deadline - time.monotonic())
        assert d.send_deadline == deadline  # nothing told the child: it reads the old value
        _release_the_first(cluster, futures)
    assert cluster.bound() == ["s0"]
    assert cluster.bind_requests() == ["s0"]


def test_on_lost_revokes_the_process_dispatcher_at_once(cluster: Cluster) -> None:
    """Wired as the scheduler example does: the queued calls resolve LeadershipLost while the
    call on the wire is still held, and submit raises it from then on."""
    revoke: list[Callable[[LeadershipLost], None]] = []

    def on_lost(err: LeadershipLost) -> None:  # revoke the dispatcher built below
        for hook in revoke:
            hook(err)

    elector = cluster.elector(on_lost=on_lost)
    with cluster.dispatcher(elector) as d:
        revoke.append(d.revoke)
        elector.step()
        cluster.held.gate.clear()
        futures = _submit_held(cluster, d, ["r0", "r1", "r2"])
        _intrude(cluster.server)
        elector.step()
        for f in futures[1:]:
            assert isinstance(f.exception(WAIT), LeadershipLost)
        assert not futures[0].done()  # still held on the server
        with pytest.raises(LeadershipLost):
            d.submit(PodBinding.for_pod(cluster.pod("late"), "node-1"))
        cluster.held.gate.set()
        assert futures[0].result(WAIT) is Outcome.SUCCESS
    assert cluster.bound() == ["r0"]
    assert cluster.bind_requests() == ["r0"]


def test_release_closes_the_childs_gate_at_once_and_frees_the_lease(cluster: Cluster) -> None:
    """``release()`` closes the send gate and frees the lease: the deadline in shared memory
    is 0.0 the moment it stops leading, so a call submitted after the release is never sent
    and resolves ``LeadershipLost`` (a release is no loss: ``lost`` stays None), and the
    Lease names no holder."""
    elector = cluster.elector()
    with cluster.dispatcher(elector) as d:
        elector.step()
        before = d.submit(PodBinding.for_pod(cluster.pod("before"), "node-1"))
        assert before.result(WAIT) is Outcome.SUCCESS
        assert elector.release() is True
        assert d.send_deadline == 0.0 and elector.lost is None
        late = d.submit(PodBinding.for_pod(cluster.pod("after"), "node-1"))
        assert isinstance(late.exception(WAIT), LeadershipLost)
    assert cluster.bind_requests() == ["before"]
    assert cluster.bound() == ["before"]
    assert cluster.server.leases.get("kube-system", "sched")["spec"]["holderIdentity"] == ""


def test_leader_must_tell_deadlines_on_the_monotonic_clock(cluster: Cluster) -> None:
    cfg = ElectionConfig("sched", identity="a")
    fake = LeaseElector(MemoryLeaseClient(cluster.server), cfg, clock=lambda: 5.0)
    factory = functools.partial(KubernetesBackend.for_url, cluster.http.url)
    with pytest.raises(InvalidConfigError, match="monotonic"):
        ProcessDispatcher(factory, leader=fake)
    with pytest.raises(InvalidConfigError, match="watch_send_deadline"):
        ProcessDispatcher(factory, leader=object())  # type: ignore[arg-type]
    assert ProcessDispatcher(factory).send_deadline is None  # no leader: no gate
